"""UMBPClient: the node's tiered KV-cache store (include/mori_umbp.h) from Python."""
import ctypes
import enum
import os
import sys
import threading
import time

from .. import _capi, _lib
from .._capi import UmbpOpts, UmbpStats
from ..errors import (MoriError, MORI_EINVAL, MORI_EIO, MORI_EMSGSIZE, MORI_ENOENT, MORI_ENOMEM, MORI_ERANGE,
                      MORI_ESTALE, MORI_ETIMEDOUT)
from .buffers import KeyArray, key_bytes, pointer, span

KEY_MAX = _capi.UMBP_KEY_MAX

# The per-key results that the *_from_ptr / *_into_ptr calls report as False (ROCm/mori's bool);
# any other failure (MORI_ECONN, MORI_ESTALE, MORI_ETIMEDOUT of the whole call) raises.
_KEY_FAILURES = (MORI_ENOENT, MORI_EINVAL, MORI_EMSGSIZE, MORI_ENOMEM, MORI_EIO)

_GET_FIRST_CAP = 64 << 10  # get() without a buffer: first try with this many bytes


class UMBPTierType(enum.IntEnum):
    """Where a value was found (mori_umbp_tier; ROCm/mori's UMBPTierType)."""
    Unknown = _capi.UMBP_TIER_UNKNOWN
    HBM = _capi.UMBP_TIER_HBM
    DRAM = _capi.UMBP_TIER_DRAM
    SSD = _capi.UMBP_TIER_SSD


class UMBPPin(enum.IntEnum):
    """Pins (mori_umbp_pin_kind): SOFT stays in DRAM unless nothing else can be evicted; HARD is
    never evicted and counts against the uid's quota."""
    NONE = _capi.UMBP_PIN_NONE
    SOFT = _capi.UMBP_PIN_SOFT
    HARD = _capi.UMBP_PIN_HARD


class UMBPConfig:
    """How a UMBPClient reaches the store. The store's sizes, tiers and policy are morid's
    settings (kv_dram_bytes, kv_ssd_dir, kv_policy, ...), not the client's.

    runtime_dir:  morid's runtime directory (None: $MORI_RUNTIME_DIR, else /run/mori)
    name:         the client's name, as `moractl clients` shows it
    timeout_ms:   deadline of each call in milliseconds (0: the daemon's kv_timeout_ms)
    copy_threads: host threads copying one batch's values (0: libmori's choice, up to 4)
    """

    def __init__(self, runtime_dir=None, name="umbp", timeout_ms=0, copy_threads=0):
        self.runtime_dir = runtime_dir
        self.name = name
        self.timeout_ms = timeout_ms
        self.copy_threads = copy_threads

    def __repr__(self):
        return "UMBPConfig(runtime_dir=%r, name=%r, timeout_ms=%r, copy_threads=%r)" % (
            self.runtime_dir, self.name, self.timeout_ms, self.copy_threads)


class UMBPStats:
    """The store as this uid sees it (UMBPClient.stats()). Bytes and counts:
    dram_keys, dram_bytes, dram_capacity, ssd_keys, ssd_bytes, ssd_capacity (bytes of values
    held and the tier's size), quota_bytes (this uid's quota; 0: none), used_bytes (what it holds
    on both tiers), hits, misses (gets since morid started), evictions, spills (DRAM to SSD),
    promotions (SSD to DRAM)."""
    FIELDS = tuple(n for n, _ in UmbpStats._fields_ if n != "size")
    __slots__ = FIELDS

    def __init__(self, st):
        for f in self.FIELDS:
            setattr(self, f, int(getattr(st, f)))

    def as_dict(self):
        return {f: getattr(self, f) for f in self.FIELDS}

    def __repr__(self):
        return "UMBPStats(%s)" % ", ".join("%s=%d" % (f, getattr(self, f)) for f in self.FIELDS)


class UMBPExternalKvNodeMatch:
    """One node of match_external_kv: node_id (its peer address), peer_address (the same),
    hashes_by_tier {UMBPTierType: [hash]} in tier order (a hash on two tiers is in both)."""

    def __init__(self, node_id, hashes_by_tier):
        self.node_id = node_id
        self.peer_address = node_id
        self.hashes_by_tier = hashes_by_tier

    def matched_hash_count(self):
        """Distinct hashes this node holds (any tier)."""
        return len({h for hs in self.hashes_by_tier.values() for h in hs})

    def __repr__(self):
        return "UMBPExternalKvNodeMatch(%r, %r)" % (self.node_id, self.hashes_by_tier)


class UMBPExternalKvHitCountEntry:
    """get_external_kv_hit_counts: hash and hit_count_total (count_as_hit matches)."""

    def __init__(self, hash, hit_count_total):
        self.hash = hash
        self.hit_count_total = hit_count_total

    def __repr__(self):
        return "UMBPExternalKvHitCountEntry(%r, %d)" % (self.hash, self.hit_count_total)


def _protos():
    return _lib.bind("UMBP", _capi.ctypes_protos(_capi.MORI_UMBP_H))


def _exiting():
    return sys.is_finalizing()


class UMBPClient:
    """A handle on the node's UMBP store, through its own client of the local morid.

    UMBPClient(config=None, *, runtime_dir=None, name=None, timeout_ms=None, copy_threads=None):
    the keywords override config's fields (UMBPConfig). Raises MoriError: MORI_ECONN (no daemon
    answers), MORI_ENOTSUP (morid runs without a store: kv_dram_bytes = 0), MORI_EINVAL.

    Keys are str (UTF-8) or bytes, 1..KEY_MAX (256) bytes. Values are 1 byte up to the daemon's
    kv_value_max (at least 64 MiB), given as bytes, bytearray, memoryview, a numpy array or a
    torch tensor (CPU or CUDA: its data_ptr() and nbytes); the *_from_ptr / *_into_ptr calls take
    raw addresses and sizes instead, as ROCm/mori's UMBPClient does.

    Errors raise MoriError with the MORI_E* code and libmori's message. Batches return one result
    per key, in order: a status (MORI_OK, MORI_ENOENT for a miss, MORI_EINVAL, MORI_EMSGSIZE,
    MORI_ENOMEM, MORI_EIO) for batch_put / batch_get, bools for the ROCm/mori pointer calls; only a
    failure of the whole call (MORI_ECONN, MORI_ETIMEDOUT, MORI_ESTALE) raises, and then no value
    of a batch put was stored. A batch holds at most the daemon's kv_batch_max keys.

    Thread safety: calls may run from several threads at once; each releases the GIL while in
    libmori. close() waits for calls in flight. After fork() the child's calls raise MORI_ESTALE:
    open a new client there.
    """

    def __init__(self, config=None, *, runtime_dir=None, name=None, timeout_ms=None, copy_threads=None):
        cfg = config if config is not None else UMBPConfig()
        self.runtime_dir = cfg.runtime_dir if runtime_dir is None else runtime_dir
        self.name = str(cfg.name if name is None else name)
        timeout_ms = cfg.timeout_ms if timeout_ms is None else timeout_ms
        copy_threads = cfg.copy_threads if copy_threads is None else copy_threads
        self._pid = os.getpid()
        self._c = self._u = None
        self._cond = threading.Condition()
        self._busy = 0
        us = _lib.duration_us(timeout_ms, "timeout_ms", 1000)
        if us < 0:
            raise MoriError(MORI_ERANGE, "timeout_ms %r is negative (0: the daemon's kv_timeout_ms)" % timeout_ms)
        self._timeout_s = us / 1e6 if us else 30.0
        lib = _protos()
        opts = UmbpOpts()
        _lib.check(lib.mori_umbp_opts_init(ctypes.byref(opts), ctypes.sizeof(opts)), "UMBP options")
        opts.timeout_us = us
        opts.copy_threads = _lib.ival(copy_threads, "copy_threads", ctypes.c_uint32)
        c = ctypes.c_void_p()
        rd = _lib.as_bytes(self.runtime_dir, "runtime_dir")
        _lib.check(lib.mori_client_open(rd, self.name.encode(), ctypes.byref(c)), "UMBP client %r" % self.name)
        u = ctypes.c_void_p()
        rc = lib.mori_umbp_open(c.value, ctypes.byref(opts), ctypes.byref(u))
        if rc < 0:
            msg = _lib.last_error()
            lib.mori_client_close(c.value)
            raise MoriError(rc, msg or "open the UMBP store")
        self._lib, self._c, self._u = lib, c.value, u.value

    # ---- life cycle ----

    def _enter(self):
        if os.getpid() != self._pid:
            raise MoriError(MORI_ESTALE, "UMBPClient %r was opened by pid %d: open a new one after fork" %
                            (self.name, self._pid))
        with self._cond:
            if self._u is None:
                raise MoriError(MORI_EINVAL, "UMBPClient %r is closed" % self.name)
            self._busy += 1
            return self._u

    def _leave(self):
        with self._cond:
            self._busy -= 1
            if not self._busy:
                self._cond.notify_all()

    def _call(self, fn, what, *args):
        """fn(u, *args) with the handle held; MoriError for a negative return; the return."""
        u = self._enter()
        try:
            rc = fn(u, *args)
        finally:
            self._leave()
        return _lib.check(rc, what)

    @property
    def closed(self):
        return self._u is None

    def close(self):
        """Close the store's handle and the client: leases end, the store's pages are unmapped
        from this process, the values put stay in the store. Waits for calls in flight (at most
        their deadline, then MORI_ETIMEDOUT, leaving the client open). Idempotent."""
        if self._u is None or os.getpid() != self._pid:
            return
        with self._cond:
            deadline = time.monotonic() + 2 * self._timeout_s + 5
            while self._busy and self._u is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise MoriError(MORI_ETIMEDOUT, "close: %d calls still in flight" % self._busy)
                self._cond.wait(left)
            u, c, self._u, self._c = self._u, self._c, None, None
        if u is None:
            return
        self._lib.mori_umbp_close(u)
        self._lib.mori_client_close(c)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def __del__(self):
        if getattr(self, "_u", None) is not None and not _exiting() and os.getpid() == self._pid:
            try:
                self.close()
            except Exception:
                pass

    def is_distributed(self):
        """False: the store is the node's (ROCm/mori's IsDistributed)."""
        return False

    # ---- single keys ----

    def put(self, key, value, *, depth=-1, pin=UMBPPin.NONE):
        """Store value's bytes under key, replacing any value it had (ROCm/mori: Put).
        depth: the key's depth in its prefix chain (0: a prompt's first block; -1: unknown);
        pin: a UMBPPin. Raises MoriError (MORI_EINVAL: empty or too long key, empty value;
        MORI_EMSGSIZE: larger than the store takes; MORI_ENOMEM: no room)."""
        k = key_bytes(key)
        addr, n, keep = span(value, False, "put(%r)" % (key,))
        if depth == -1 and pin == UMBPPin.NONE:
            self._call(self._lib.mori_umbp_put, "put", k, len(k), addr, n)
            return
        st = self._batch(self._lib.mori_umbp_batch_put, "put", [k], [addr], [n], [depth], [pin])[0]
        del keep
        if st.status < 0:
            raise MoriError(st.status, "put %r: %s" % (key, _status_text(st.status)))

    def _get_fns(self, node):
        """(get, batch_get) of libmori for node: this node's store, whose misses go to the
        cluster index where morid has one (None), or that node's morid ("host:port")."""
        if node is None:
            return self._lib.mori_umbp_get, self._lib.mori_umbp_batch_get
        if isinstance(node, str):
            node = node.encode()
        if not isinstance(node, bytes) or not node or b"\0" in node:
            raise MoriError(MORI_EINVAL, "node %r is not host:port" % (node,))
        lib = self._lib
        return (lambda u, *a: lib.mori_umbp_get_from(u, node, *a),
                lambda u, *a: lib.mori_umbp_batch_get_from(u, node, *a))

    def get(self, key, out=None, *, node=None):
        """Copy key's value out (ROCm/mori: Get).
        node: "host:port" of another node's morid to ask for a key this node lacks (None: this
        node's store, and the cluster index's holders where morid runs with kv_index redis).
        out None: returns the value as bytes, or None for a miss.
        out a writable buffer, array or tensor: fills its first bytes and returns the value's
        length in bytes, or None for a miss; MoriError(MORI_EMSGSIZE) when out is smaller than
        the value (nothing copied; the message says the size needed)."""
        k = key_bytes(key)
        got = ctypes.c_size_t()
        if out is not None:
            addr, cap, keep = span(out, True, "get(%r)" % (key,))
            rc = self._get(k, addr, cap, got, node)
            del keep
            if rc == MORI_ENOENT:
                return None
            if rc == MORI_EMSGSIZE:
                raise MoriError(rc, "get %r: the value is %d bytes, the buffer %d" % (key, got.value, cap))
            _lib.check(rc, "get %r" % (key,))
            return got.value
        cap = _GET_FIRST_CAP
        for _ in range(8):  # a value replaced by a larger one between tries: try again
            buf = bytearray(cap)
            addr, _, keep = span(buf, True, "get")
            rc = self._get(k, addr, cap, got, node)
            if rc == MORI_ENOENT:
                return None
            if rc != MORI_EMSGSIZE:
                _lib.check(rc, "get %r" % (key,))
                return bytes(memoryview(buf)[:got.value])
            cap = got.value
            del keep
        raise MoriError(MORI_EMSGSIZE, "get %r: the value kept growing between tries" % (key,))

    def _get(self, k, addr, cap, got, node=None):
        fn = self._get_fns(node)[0]
        u = self._enter()
        try:
            rc = fn(u, k, len(k), addr, cap, ctypes.byref(got))
        finally:
            self._leave()
        if rc < 0 and rc not in (MORI_ENOENT, MORI_EMSGSIZE):
            _lib.check(rc, "get")
        return rc

    def exists(self, key):
        """True if key is in the store, on any tier (ROCm/mori: Exists)."""
        k = key_bytes(key)
        return self._call(self._lib.mori_umbp_exists, "exists", k, len(k)) == 1

    def remove(self, key):
        """Remove key: True, or False when it was absent. Readers holding the value finish with
        the old bytes."""
        k = key_bytes(key)
        u = self._enter()
        try:
            rc = self._lib.mori_umbp_remove(u, k, len(k))
        finally:
            self._leave()
        if rc == MORI_ENOENT:
            return False
        _lib.check(rc, "remove %r" % (key,))
        return True

    def pin(self, key, kind=UMBPPin.SOFT):
        """Pin (UMBPPin.SOFT, HARD) or unpin (UMBPPin.NONE) a stored key. MoriError:
        MORI_ENOENT when absent, MORI_ENOMEM when a hard pin would pass the uid's quota."""
        k = key_bytes(key)
        kind = _lib.ival(kind, "pin kind", ctypes.c_int, lo=0, hi=2)
        self._call(self._lib.mori_umbp_pin, "pin %r" % (key,), k, len(k), kind)

    # ---- batches ----

    def _batch(self, fn, what, keys, addrs, sizes, depths=None, pins=None):
        """Run a batch put or get; the filled mori_umbp_item array."""
        ka = KeyArray(keys)
        if not ka.n:
            return []
        items = ka.items(addrs, sizes, depths, pins)
        self._call(fn, what, items, ka.n, None)
        return items

    def _spans(self, values, writable, what, n):
        if len(values) != n:
            raise MoriError(MORI_EINVAL, "%s: %d keys but %d buffers" % (what, n, len(values)))
        return [span(v, writable, "%s[%d]" % (what, i)) for i, v in enumerate(values)]

    def batch_put(self, keys, values, depths=None, pins=None):
        """Store values[i] under keys[i], all in one round trip for the slots and one for the
        commit (ROCm/mori: BatchPut). depths: each key's depth in its prefix chain (-1: unknown;
        ROCm/mori's BatchPutWithDepth), pins: UMBPPin per key. Returns one status per key
        (MORI_OK or a MORI_E* code); raises only when the whole call failed."""
        keys = list(keys)
        spans = self._spans(list(values), False, "batch_put values", len(keys))
        for name, col in (("depths", depths), ("pins", pins)):
            if col is not None and len(col) != len(keys):
                raise MoriError(MORI_EINVAL, "batch_put: %d keys but %d %s" % (len(keys), len(col), name))
        items = self._batch(self._lib.mori_umbp_batch_put, "batch_put", keys, [s[0] for s in spans],
                            [s[1] for s in spans], depths, pins)
        del spans
        return [it.status for it in items]

    def batch_put_with_depth(self, keys, values, depths):
        """batch_put with each key's prefix-chain depth (ROCm/mori: BatchPutWithDepth)."""
        return self.batch_put(keys, values, depths=depths)

    def batch_get(self, keys, outs=None, details=False, *, node=None):
        """Copy the values of keys out in one round trip for the leases and one for their release
        (ROCm/mori: BatchGet).
        outs None: returns a list of bytes, None for a miss; any other failure of a key raises.
        outs a list of writable buffers, arrays or tensors (one per key): fills them and returns
        one status per key (MORI_OK, MORI_ENOENT for a miss, MORI_EMSGSIZE when the buffer is
        smaller than the value, ...); details=True returns (status, length in bytes, UMBPTierType
        it was found on) per key instead. node: as get's (a remote get: the key's holder unreachable
        or gone mid-transfer is MORI_ECONN, MORI_ETIMEDOUT or MORI_EPEERDEAD)."""
        keys = list(keys)
        if outs is not None:
            spans = self._spans(list(outs), True, "batch_get outs", len(keys))
            items = self._batch(self._get_fns(node)[1], "batch_get", keys, [s[0] for s in spans],
                                [s[1] for s in spans])
            del spans
            if details:
                return [(it.status, it.len, UMBPTierType(it.tier) if it.tier <= 3 else it.tier) for it in items]
            return [it.status for it in items]
        caps = [_GET_FIRST_CAP] * len(keys)
        result = [None] * len(keys)
        todo = list(range(len(keys)))
        for _ in range(8):
            bufs = [bytearray(caps[i]) for i in todo]
            st = self.batch_get([keys[i] for i in todo], bufs, details=True, node=node)
            again = []
            for j, i in enumerate(todo):
                status, n, _ = st[j]
                if status == 0:
                    result[i] = bytes(memoryview(bufs[j])[:n])
                elif status == MORI_EMSGSIZE:
                    caps[i] = n
                    again.append(i)
                elif status != MORI_ENOENT:
                    raise MoriError(status, "batch_get %r: %s" % (keys[i], _status_text(status)))
            todo = again
            if not todo:
                return result
        raise MoriError(MORI_EMSGSIZE, "batch_get: values kept growing between tries")

    def batch_exists(self, keys):
        """[True where keys[i] is in the store] (ROCm/mori: BatchExists)."""
        ka = KeyArray(keys)
        if not ka.n:
            return []
        present = (ctypes.c_uint8 * ka.n)()
        self._call(self._lib.mori_umbp_batch_exists, "batch_exists", ka.keys(), ka.n, present)
        return [bool(p) for p in present]

    def batch_exists_consecutive(self, keys):
        """How many of keys, from the first, are in the store (stops at the first that is not):
        the prefix match a scheduler asks for (ROCm/mori: BatchExistsConsecutive)."""
        ka = KeyArray(keys)
        if not ka.n:
            return 0
        count = ctypes.c_size_t()
        self._call(self._lib.mori_umbp_batch_exists_consecutive, "batch_exists_consecutive", ka.keys(), ka.n,
                   ctypes.byref(count))
        return count.value

    # ---- external KV (ROCm/mori's names; docs/umbp.md, "Cluster") ----

    def _tier(self, tier):
        t = _lib.ival(int(tier), "tier", ctypes.c_int, lo=1, hi=3)
        return t

    def report_external_kv_blocks(self, hashes, tier):
        """This process holds hashes (keys) in its own cache on tier (UMBPTierType HBM, DRAM or
        SSD). Additive and idempotent; ends with a revoke, this client's close or death, or its
        node's."""
        ka = KeyArray(hashes)
        if ka.n:
            self._call(self._lib.mori_umbp_report_external_kv_blocks, "report_external_kv_blocks", ka.keys(), ka.n,
                       self._tier(tier))

    def revoke_external_kv_blocks(self, hashes, tier):
        """This client's reports of hashes at tier end (others' reports and other tiers stay)."""
        ka = KeyArray(hashes)
        if ka.n:
            self._call(self._lib.mori_umbp_revoke_external_kv_blocks, "revoke_external_kv_blocks", ka.keys(), ka.n,
                       self._tier(tier))

    def revoke_all_external_kv_blocks_at_tier(self, tier):
        """Every report of this client at tier ends; how many keys."""
        n = ctypes.c_size_t()
        self._call(self._lib.mori_umbp_revoke_all_at_tier, "revoke_all_at_tier", self._tier(tier), ctypes.byref(n))
        return n.value

    revoke_all_at_tier = revoke_all_external_kv_blocks_at_tier

    def match_external_kv(self, hashes, count_as_hit=False):
        """[UMBPExternalKvNodeMatch]: one per live node holding any of hashes, with the hashes it
        holds by tier. count_as_hit only on the real request-routing path (it feeds the hit
        counters). Raises MoriError (MORI_ECONN: the cluster index is unreachable)."""
        hashes = list(hashes)
        ka = KeyArray(hashes)
        if not ka.n:
            return []
        out = ctypes.POINTER(_capi.UmbpExtMatch)()
        nout = ctypes.c_size_t()
        self._call(self._lib.mori_umbp_match_external_kv, "match_external_kv", ka.keys(), ka.n,
                   1 if count_as_hit else 0, ctypes.byref(out), ctypes.byref(nout))
        try:
            res = []
            for j in range(nout.value):
                m = out[j]
                mask = ctypes.cast(m.tier_mask, ctypes.POINTER(ctypes.c_uint8))
                node = ctypes.cast(m.node_id, ctypes.c_char_p).value.decode()
                by_tier = {}
                for i in range(ka.n):
                    bits = mask[i]
                    for t in (UMBPTierType.HBM, UMBPTierType.DRAM, UMBPTierType.SSD):
                        if bits & (1 << int(t)):
                            by_tier.setdefault(t, []).append(hashes[i])
                res.append(UMBPExternalKvNodeMatch(node, dict(sorted(by_tier.items()))))
            return res
        finally:
            self._lib.mori_umbp_external_kv_match_free(out, nout.value)

    def get_external_kv_hit_counts(self, hashes):
        """[UMBPExternalKvHitCountEntry] for the hashes that have a counter (sparse: a hash never
        counted, or whose counter expired, is left out; duplicates once)."""
        hashes = list(dict.fromkeys(hashes))
        ka = KeyArray(hashes)
        if not ka.n:
            return []
        counts = (ctypes.c_uint64 * ka.n)()
        present = (ctypes.c_uint8 * ka.n)()
        self._call(self._lib.mori_umbp_get_external_kv_hit_counts, "get_external_kv_hit_counts", ka.keys(), ka.n,
                   counts, present)
        return [UMBPExternalKvHitCountEntry(hashes[i], counts[i]) for i in range(ka.n) if present[i]]

    # ---- ROCm/mori's pointer calls (SGLang's host KV pool hands these addresses) ----

    def put_from_ptr(self, key, src, size):
        """Put size bytes at address src (host or a CUDA device pointer of this process). True,
        or False when the store refused the key (its status: see batch_put); whole-call
        failures raise (ROCm/mori: Put)."""
        k = key_bytes(key)
        u = self._enter()
        try:
            rc = self._lib.mori_umbp_put(u, k, len(k), pointer(src, "src"), _lib.ival(size, "size", ctypes.c_size_t))
        finally:
            self._leave()
        return _ok(rc, "put_from_ptr")

    def get_into_ptr(self, key, dst, size, *, node=None):
        """Copy key's value to address dst (capacity size bytes). True, or False for a miss or
        a refused key (ROCm/mori: Get). node: as get's."""
        k = key_bytes(key)
        got = ctypes.c_size_t()
        fn = self._get_fns(node)[0]
        u = self._enter()
        try:
            rc = fn(u, k, len(k), pointer(dst, "dst"), _lib.ival(size, "size", ctypes.c_size_t),
                                         ctypes.byref(got))
        finally:
            self._leave()
        return _ok(rc, "get_into_ptr")

    def _ptr_batch(self, fn, what, keys, ptrs, sizes, depths=None):
        keys = list(keys)
        ptrs, sizes = list(ptrs), list(sizes)
        if not len(keys) == len(ptrs) == len(sizes) or (depths is not None and len(depths) != len(keys)):
            raise MoriError(MORI_EINVAL, "%s: %d keys, %d pointers, %d sizes%s" % (
                what, len(keys), len(ptrs), len(sizes), "" if depths is None else ", %d depths" % len(depths)))
        addrs = [pointer(p, "%s pointer %d" % (what, i)) for i, p in enumerate(ptrs)]
        sz = [_lib.ival(s, "%s size %d" % (what, i), ctypes.c_size_t) for i, s in enumerate(sizes)]
        items = self._batch(fn, what, keys, addrs, sz, depths)
        return [it.status == 0 for it in items]

    def batch_put_from_ptr(self, keys, ptrs, sizes):
        """ROCm/mori's BatchPut: [True where keys[i]'s sizes[i] bytes at ptrs[i] were stored]."""
        return self._ptr_batch(self._lib.mori_umbp_batch_put, "batch_put_from_ptr", keys, ptrs, sizes)

    def batch_put_from_ptr_with_depth(self, keys, ptrs, sizes, depths):
        """ROCm/mori's BatchPutWithDepth: batch_put_from_ptr with each key's prefix-chain depth
        (an empty list: none known)."""
        depths = list(depths) or None
        return self._ptr_batch(self._lib.mori_umbp_batch_put, "batch_put_from_ptr_with_depth", keys, ptrs, sizes,
                               depths)

    def batch_get_into_ptr(self, keys, ptrs, sizes, *, node=None):
        """ROCm/mori's BatchGet: [True where keys[i]'s value was copied to ptrs[i] (capacity
        sizes[i] bytes)]. node: as get's."""
        return self._ptr_batch(self._get_fns(node)[1], "batch_get_into_ptr", keys, ptrs, sizes)

    # ---- the store ----

    def clear(self):
        """Remove every key of this uid, on every tier (ROCm/mori: Clear). True."""
        self._call(self._lib.mori_umbp_clear, "clear")
        return True

    def flush(self):
        """Wait until every value spilled to SSD so far is durable there (ROCm/mori: Flush).
        True (at once without an SSD tier)."""
        self._call(self._lib.mori_umbp_flush, "flush")
        return True

    def register_memory(self, ptr, size=None):
        """Register memory later gets and puts use (ROCm/mori: RegisterMemory): an address and
        its size in bytes, or a buffer, array or tensor (size from it). Optional: unregistered
        memory works, at the cost of staging. True. MoriError: MORI_EBUSY (overlaps a registered
        range), MORI_ENOGPU, MORI_EINVAL."""
        if size is None:
            addr, size, _ = span(ptr, False, "register_memory")
        else:
            addr, size = pointer(ptr, "ptr"), _lib.ival(size, "size", ctypes.c_size_t)
        self._call(self._lib.mori_umbp_register_memory, "register_memory", addr, size)
        return True

    def deregister_memory(self, ptr):
        """Undo register_memory (the address, or the same buffer, array or tensor)."""
        addr = pointer(ptr, "ptr") if isinstance(ptr, int) else span(ptr, False, "deregister_memory")[0]
        self._call(self._lib.mori_umbp_deregister_memory, "deregister_memory", addr)

    def stats(self):
        """The store as this uid sees it: a UMBPStats (bytes and counts)."""
        st = UmbpStats()
        st.size = ctypes.sizeof(st)
        self._call(self._lib.mori_umbp_stats_get, "stats", ctypes.byref(st))
        return UMBPStats(st)

    def __repr__(self):
        return "<UMBPClient %r %s>" % (self.name, "closed" if self._u is None else "open")


def _ok(rc, what):
    if rc >= 0:
        return True
    if rc in _KEY_FAILURES:
        return False
    _lib.check(rc, what)


def _status_text(code):
    try:
        return _lib.strerror(code)
    except MoriError:
        return str(code)
