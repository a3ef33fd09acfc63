"""mori.nixl_compat: NIXL's Python agent on mori, so that a connector written for NIXL (vLLM's
NixlConnector) runs on mori by changing its import:

    from mori.nixl_compat import nixl_agent as NixlWrapper, nixl_agent_config, nixlXferTelemetry

The calls vLLM's NIXL connector makes work as NIXL documents them: get_reg_descs,
register_memory, get_agent_metadata, add_remote_agent, get_xfer_descs, prep_xfer_dlist,
make_prepped_xfer, transfer, check_xfer_state ("DONE", "PROC" or "ERR"), get_xfer_telemetry,
get_new_notifs, send_notif, release_xfer_handle, release_dlist_handle, remove_remote_agent,
deregister_memory; also initialize_xfer, update_notifs, check_remote_xfer_done,
make_connection, check_remote_metadata, get_serialized_descs/deserialize_descs.

Accepted and ignored: backends (every name, e.g. "UCX": morid picks the transport), the
agent config's enable_prog_thread, enable_listen_thread, listen_port, num_threads, sync_mode
and capture_telemetry (telemetry is always kept), instantiate_all, skip_desc_merge=False's
merging is done (contiguous descriptors merge), the device id of descriptors (the pointer says
which GPU). Refused with MoriError(MORI_ENOTSUP): memory types FILE, BLOCK and OBJ; the
metadata listener and server calls (send_local_metadata, fetch_remote_metadata,
send_partial_agent_metadata, get_partial_agent_metadata, invalidate_local_metadata: exchange
get_agent_metadata()'s bytes out of band, as vLLM does); prep_mem_view/release_mem_view (UCX's
GPU device API); estimate_xfer_cost; query_memory.

How notifications travel. libmori's notification is a 64-bit tag delivered after a
transfer's data, and it has no standalone form; NIXL's are byte strings naming their sender.
So every agent allocates a small inbox region (published in its metadata), and a message is
sent as a sequence of 1-byte writes into the target's inbox, each notifying with a tag that
carries 4 bytes of the message, a 22-bit random sender id and framing bits. Notifications of
one initiator to one target arrive in order, so the target reassembles them per sender (and,
on one node, per sender pid); the first message to each target also carries the sender's
name. A transfer's notif_msg is sent once all of its batches are complete, when the
initiator sees that: in check_xfer_state (or transfer itself, for transfers that complete
during the call, as on one node). Two senders on different nodes with the same random id would
mix their messages at a common target (odds 2^-22 per pair).
"""
import base64
import enum
import json
import os
import pickle
import threading
import time

try:
    import numpy as np
except ImportError:  # NIXL's API needs numpy too
    np = None

from . import _lib
from . import io as _io
from .errors import (MoriError, MORI_EINVAL, MORI_ENOENT, MORI_ERANGE, MORI_ENOTSUP, MORI_EBUSY,
                     MORI_EPROTO, MORI_OK)
from .io import IOEngine, IOEngineConfig, MemoryDesc, MemoryLocationType

NIXL_INIT_AGENT = "NIXL_INIT_AGENT"
DEFAULT_COMM_PORT = 5555
_MD_MAGIC = b"MORINIXL1"

# notification tag: magic (4) | sender (22) | flags (3) | length (3) | payload (32)
_TAG_MAGIC = 0xB
_F_START, _F_END, _F_NAME = 4, 2, 1
_CHUNK = 4


def _need_numpy():
    if np is None:
        raise MoriError(MORI_ENOTSUP, "mori.nixl_compat needs numpy")


def _is_tensor(obj):
    return _io._torch_tensor(obj)


class nixl_thread_sync_t(enum.Enum):
    NIXL_THREAD_SYNC_NONE = 0
    NIXL_THREAD_SYNC_STRICT = 1
    NIXL_THREAD_SYNC_RW = 2
    NIXL_THREAD_SYNC_DEFAULT = 3


class nixl_agent_config:
    """NIXL's agent configuration; every field is accepted and none changes mori's behaviour
    (the agent is always thread-safe). mori adds runtime_dir (None: $MORI_RUNTIME_DIR, else
    /run/mori) and timeout_ms (each transfer's deadline; 0: libmori's default)."""

    def __init__(self, enable_prog_thread=True, enable_listen_thread=False, listen_port=DEFAULT_COMM_PORT,
                 capture_telemetry=False, num_threads=0, backends=("UCX",), sync_mode=None, runtime_dir=None,
                 timeout_ms=0):
        if sync_mode is not None and not isinstance(sync_mode, nixl_thread_sync_t):
            raise TypeError("sync_mode must be a nixl_thread_sync_t (got %r)" % type(sync_mode).__name__)
        self.backends = list(backends)
        self.enable_pthread = enable_prog_thread
        self.enable_listen = enable_listen_thread
        self.port = listen_port
        self.capture_telemetry = capture_telemetry
        self.num_threads = num_threads
        self.sync_mode = sync_mode
        self.runtime_dir = runtime_dir
        self.timeout_ms = timeout_ms


class nixlXferTelemetry:
    """A transfer's telemetry: startTime (us since the epoch), postDuration and xferDuration
    (us), totalBytes, descCount (descriptors after merging)."""

    def __init__(self, startTime=0, postDuration=0, xferDuration=0, totalBytes=0, descCount=0):
        self.startTime = startTime
        self.postDuration = postDuration
        self.xferDuration = xferDuration
        self.totalBytes = totalBytes
        self.descCount = descCount

    def __repr__(self):
        return "nixlXferTelemetry(%s)" % ", ".join("%s=%r" % kv for kv in self.__dict__.items())


_MEM_TYPES = {"DRAM": MemoryLocationType.CPU, "cpu": MemoryLocationType.CPU,
              "VRAM": MemoryLocationType.GPU, "cuda": MemoryLocationType.GPU}


def _mem_type(t):
    if t in _MEM_TYPES:
        return "VRAM" if _MEM_TYPES[t] == MemoryLocationType.GPU else "DRAM"
    if t in ("FILE", "BLOCK", "OBJ"):
        raise MoriError(MORI_ENOTSUP, "memory type %s: mori moves host and GPU memory only" % t)
    raise MoriError(MORI_EINVAL, "unknown memory type %r (DRAM or VRAM)" % (t,))


class nixlRegDList:
    """Descriptors to register: (address, length, device id, meta) rows of one memory type.
    Tensors passed to get_reg_descs are kept alive with it."""

    def __init__(self, mem_type, rows, keep=None):
        self.mem_type = _mem_type(mem_type)
        self.rows = [(int(a), int(n), int(d), str(m)) for a, n, d, m in rows]
        self.keep = keep

    def getType(self):
        return self.mem_type

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def __getstate__(self):
        return {"mem_type": self.mem_type, "rows": self.rows, "keep": None}

    def __repr__(self):
        return "nixlRegDList(%s, %d descs)" % (self.mem_type, len(self.rows))


class nixlXferDList:
    """Transfer descriptors: an (n, 3) uint64 array of (address, length, device id)."""

    def __init__(self, mem_type, rows):
        _need_numpy()
        self.mem_type = _mem_type(mem_type)
        a = np.asarray(rows, dtype=np.int64) if not isinstance(rows, np.ndarray) else rows
        if a.size == 0:
            a = np.zeros((0, 3), dtype=np.int64)
        if a.ndim != 2 or a.shape[1] != 3:
            raise MoriError(MORI_EINVAL, "transfer descriptors need (address, length, device id) rows")
        if a.dtype != np.uint64 and a.size and a.min() < 0:
            raise MoriError(MORI_EINVAL, "negative address or length in transfer descriptors")
        self.descs = np.ascontiguousarray(a, dtype=np.uint64)

    def getType(self):
        return self.mem_type

    def __len__(self):
        return int(self.descs.shape[0])

    def __repr__(self):
        return "nixlXferDList(%s, %d descs)" % (self.mem_type, len(self))


class _Regions:
    """An agent's registered regions, sorted by address, for finding the region of a descriptor."""

    def __init__(self, rows):
        # rows: (address, size, device, mem_type, MemoryDesc)
        rows = sorted(rows, key=lambda r: r[0])
        self.rows = rows
        self.base = np.array([r[0] for r in rows], dtype=np.uint64)
        self.end = np.array([r[0] + r[1] for r in rows], dtype=np.uint64)

    def resolve(self, descs, who):
        """Region index and offset of every (address, length) row; MORI_ENOENT naming the first
        row that lies in no region."""
        addr, ln = descs[:, 0], descs[:, 1]
        if ln.size and (ln == 0).any():
            i = int(np.nonzero(ln == 0)[0][0])
            raise MoriError(MORI_EINVAL, "descriptor %d has length 0" % i)
        idx = np.searchsorted(self.base, addr, side="right").astype(np.int64) - 1
        ok = idx >= 0
        safe = np.where(ok, idx, 0)
        if len(self.rows):
            ok &= (addr + ln) <= self.end[safe]
        else:
            ok[:] = False
        if not ok.all():
            i = int(np.nonzero(~ok)[0][0])
            raise MoriError(MORI_ENOENT, "descriptor %d [%#x, +%d) lies in no region registered by %s" % (
                i, int(addr[i]), int(ln[i]), who))
        return safe.astype(np.int32), (addr - self.base[safe]).astype(np.uint64)


class _Side:
    """A prepared descriptor list: for each descriptor, its region, offset and length."""

    def __init__(self, agent_name, remote, regions, reg, off, ln, mem_type):
        self.agent_name = agent_name  # None for the local side
        self.remote = remote          # None (local side), a _RemoteAgent, or "self" (loopback)
        self.regions = regions
        self.reg = reg
        self.off = off
        self.len = ln
        self.mem_type = mem_type


class nixl_prepped_dlist_handle:
    """A prepared descriptor list (from prep_xfer_dlist); release() drops it."""
    __slots__ = ("_side", "_agent", "_released")

    def __init__(self, agent, side):
        self._agent = agent
        self._side = side
        self._released = False

    def release(self):
        self._released = True
        self._side = None

    def __repr__(self):
        return "nixl_prepped_dlist_handle(%s, released=%s)" % (
            "local" if self._side is None or self._side.agent_name is None else self._side.agent_name,
            self._released)


class _Xfer:
    def __init__(self, op, groups, remote, notif_msg, ndescs, nbytes):
        self.op = op
        self.groups = groups          # [(local MemoryDesc, remote MemoryDesc, (n, 3) uint64 array)]
        self.remote = remote          # the _RemoteAgent notified (None: loopback)
        self.notif_msg = notif_msg
        self.ndescs = ndescs
        self.nbytes = nbytes
        self.statuses = []
        self.state = "INIT"           # INIT, PROC, DONE, ERR
        self.error = None
        self.pending_msg = None
        self.t_start = self.t_post = self.t_done = 0.0


class nixl_xfer_handle:
    """A transfer request (from make_prepped_xfer or initialize_xfer). release() frees it,
    cancelling it if it is still running. error: the MoriError of a transfer in state "ERR"."""
    __slots__ = ("_x", "_agent", "_released", "__weakref__")

    def __init__(self, agent, x):
        self._agent = agent
        self._x = x
        self._released = False

    @property
    def error(self):
        return self._x.error if self._x is not None else None

    def release(self):
        if not self._released:
            self._agent._release_xfer(self)
            self._released = True

    def __repr__(self):
        return "nixl_xfer_handle(%s, released=%s)" % (self._x.state if self._x else "-", self._released)


class _RemoteAgent:
    def __init__(self, name, node, inbox, regions):
        self.name = name
        self.node = node
        self.inbox = inbox        # MemoryDesc of its inbox
        self.regions = regions    # _Regions
        self.named = False        # our name sent to it yet


def _b64(b):
    return base64.b64encode(b).decode()


class nixl_agent:
    """A NIXL agent on mori: one IOEngine (one morid client) named agent_name."""

    def __init__(self, agent_name, nixl_conf=None, instantiate_all=False):
        _need_numpy()
        conf = nixl_conf or nixl_agent_config()
        self.name = str(agent_name)
        self.conf = conf
        self._lock = threading.RLock()
        self.engine = IOEngine(self.name, IOEngineConfig(runtime_dir=conf.runtime_dir, timeout_ms=conf.timeout_ms,
                                                         enable_notification=False))
        self._inbox = self.engine.allocate(4096, MemoryLocationType.CPU)
        self._sender = int.from_bytes(os.urandom(3), "little") & 0x3FFFFF
        self._regions = []                # (address, size, device, mem_type, MemoryDesc)
        self._local = _Regions([])
        self._remotes = {}
        self._self = None
        self._rx = {}                     # (from_pid, sender) -> bytearray being assembled
        self._names = {}                  # (from_pid, sender) -> agent name
        self._live = set()                # _Xfer posted and not released
        self.notifs = {}
        self.raw_notifs = []              # notifications that were not NIXL messages
        self.plugin_list = ["MORI"] + [b for b in conf.backends if b != "MORI"]
        self.backends = {}
        for b in conf.backends:
            self.create_backend(b)

    # ---- backends (accepted, ignored) ----

    def get_plugin_list(self):
        return list(self.plugin_list)

    def get_plugin_mem_types(self, backend):
        return ["DRAM", "VRAM"]

    def get_plugin_params(self, backend):
        return {}

    def get_backend_mem_types(self, backend):
        return ["DRAM", "VRAM"]

    def get_backend_params(self, backend):
        return {}

    def create_backend(self, backend, initParams={}):
        """Accepted and ignored (morid chooses the transport)."""
        self.backends[backend] = dict(initParams)

    # ---- descriptors ----

    def get_reg_descs(self, descs, mem_type=None):
        """A nixlRegDList from (address, length, device id[, meta]) tuples with mem_type, an Nx3
        array with mem_type, a contiguous tensor, a list of tensors, or a nixlRegDList."""
        if isinstance(descs, nixlRegDList):
            return descs
        if isinstance(descs, nixlXferDList):
            raise MoriError(MORI_EINVAL, "get_reg_descs: a transfer list, not a registration list")
        if _is_tensor(descs):
            descs = [descs]
        if isinstance(descs, (list, tuple)) and descs and _is_tensor(descs[0]):
            rows, t0 = [], descs[0].device
            for t in descs:
                if t.device != t0 or not t.is_contiguous():
                    raise MoriError(MORI_EINVAL, "get_reg_descs: tensors must be contiguous and on one device")
                rows.append((t.data_ptr(), t.numel() * t.element_size(), max(t.get_device(), 0), ""))
            return nixlRegDList("VRAM" if t0.type == "cuda" else "DRAM", rows, keep=list(descs))
        if mem_type is None:
            raise MoriError(MORI_EINVAL, "get_reg_descs: give a memory type with address tuples")
        if np is not None and isinstance(descs, np.ndarray):
            if descs.ndim != 2 or descs.shape[1] != 3:
                raise MoriError(MORI_EINVAL, "get_reg_descs: an Nx3 array is needed")
            return nixlRegDList(mem_type, [(int(a), int(n), int(d), "") for a, n, d in descs])
        rows = []
        for r in descs:
            if len(r) not in (3, 4):
                raise MoriError(MORI_EINVAL, "get_reg_descs: (address, length, device id, meta) tuples needed")
            rows.append(tuple(r) if len(r) == 4 else tuple(r) + ("",))
        return nixlRegDList(mem_type, rows)

    def get_xfer_descs(self, descs, mem_type=None):
        """A nixlXferDList from (address, length, device id) tuples with mem_type, an Nx3 array
        with mem_type, a contiguous tensor, a list of tensors, or a nixlXferDList."""
        if isinstance(descs, nixlXferDList):
            return descs
        if isinstance(descs, nixlRegDList):
            raise MoriError(MORI_EINVAL, "get_xfer_descs: a registration list, not a transfer list")
        if _is_tensor(descs):
            descs = [descs]
        if isinstance(descs, (list, tuple)) and descs and _is_tensor(descs[0]):
            t0 = descs[0].device
            rows = []
            for t in descs:
                if t.device != t0 or not t.is_contiguous():
                    raise MoriError(MORI_EINVAL, "get_xfer_descs: tensors must be contiguous and on one device")
                rows.append((t.data_ptr(), t.numel() * t.element_size(), max(t.get_device(), 0)))
            return nixlXferDList("VRAM" if t0.type == "cuda" else "DRAM", rows)
        if mem_type is None:
            raise MoriError(MORI_EINVAL, "get_xfer_descs: give a memory type with address tuples")
        if isinstance(descs, (list, tuple)) and descs and len(descs[0]) != 3:
            raise MoriError(MORI_EINVAL, "get_xfer_descs: (address, length, device id) tuples needed")
        return nixlXferDList(mem_type, descs)

    def get_serialized_descs(self, descs):
        return pickle.dumps(descs)

    def deserialize_descs(self, serialized_descs):
        return pickle.loads(serialized_descs)

    # ---- memory ----

    def register_memory(self, reg_list, mem_type=None, backends=[]):
        """Register every descriptor with mori (one registration each); returns the
        nixlRegDList for deregister_memory. All or none: a failure deregisters the ones done."""
        dl = self.get_reg_descs(reg_list, mem_type)
        loc = _MEM_TYPES[dl.mem_type]
        done = []
        try:
            for (addr, size, dev, _meta) in dl.rows:
                desc = self.engine.register_memory(addr, size, dev, loc)
                done.append((addr, size, dev, dl.mem_type, desc))
        except MoriError:
            for r in done:
                self.engine.deregister_memory(r[4])
            raise
        if dl.keep is not None:
            for r in done:
                r[4]._keep_tensors = dl.keep
        with self._lock:
            self._regions.extend(done)
            self._local = _Regions(self._regions)
        return dl

    def deregister_memory(self, dereg_list, backends=[]):
        """Deregister what register_memory registered (MORI_ENOENT for a descriptor that is not)."""
        with self._lock:
            todo = []
            for (addr, size, _dev, _meta) in dereg_list.rows:
                hit = [r for r in self._regions if r[0] == addr and r[1] == size]
                if not hit:
                    raise MoriError(MORI_ENOENT, "deregister_memory: [%#x, +%d) is not registered" % (addr, size))
                todo.append(hit[0])
            for r in todo:
                self._regions.remove(r)
            self._local = _Regions(self._regions)
        for r in todo:
            self.engine.deregister_memory(r[4])

    def query_memory(self, reg_list, backend, mem_type=None):
        raise MoriError(MORI_ENOTSUP, "query_memory: not supported by mori")

    # ---- metadata ----

    def get_agent_metadata(self):
        """This agent's metadata (bytes, to send out of band): its name, node, inbox and every
        registered region (address, size, device, memory type, mori blob)."""
        with self._lock:
            regions = [[a, n, d, t, _b64(desc.blob)] for a, n, d, t, desc in self._regions]
        md = {"name": self.name, "node": self.engine.node, "pid": os.getpid(),
              "inbox": _b64(self._inbox.blob), "regions": regions}
        return _MD_MAGIC + json.dumps(md, separators=(",", ":")).encode()

    def add_remote_agent(self, metadata):
        """Load a peer's metadata; returns its name. Loading a name again replaces the old entry
        (its opened regions are closed)."""
        metadata = _lib.as_blob(metadata, "add_remote_agent: metadata")
        if not metadata.startswith(_MD_MAGIC):
            raise MoriError(MORI_EPROTO, "add_remote_agent: not mori agent metadata")
        try:
            md = json.loads(metadata[len(_MD_MAGIC):].decode())
            rows = []
            for a, n, d, t, blob in md["regions"]:
                b = base64.b64decode(blob)
                loc = _MEM_TYPES[t]
                rows.append((int(a), int(n), int(d), t, MemoryDesc(md["name"], 0, int(d), int(a), int(n), loc, b)))
            inbox = MemoryDesc(md["name"], 0, -1, 0, 4096, MemoryLocationType.CPU, base64.b64decode(md["inbox"]))
            ra = _RemoteAgent(md["name"], md["node"], inbox, _Regions(rows))
        except (ValueError, KeyError, TypeError) as e:
            raise MoriError(MORI_EPROTO, "add_remote_agent: corrupt metadata (%s)" % e)
        if ra.name == self.name:
            raise MoriError(MORI_EINVAL, "add_remote_agent: that is this agent's own metadata")
        with self._lock:
            old = self._remotes.pop(ra.name, None)
            self._remotes[ra.name] = ra
        if old is not None:
            self._close_remote(old)
        return ra.name

    def remove_remote_agent(self, agent):
        """Forget a peer: its regions are closed (transfers on them still running are cancelled)."""
        with self._lock:
            ra = self._remotes.pop(agent, None)
        if ra is None:
            raise MoriError(MORI_ENOENT, "remove_remote_agent: unknown agent %r" % agent)
        self._close_remote(ra)

    def _close_remote(self, ra):
        for d in [r[4] for r in ra.regions.rows] + [ra.inbox]:
            try:
                self.engine.deregister_memory(d)
            except MoriError:
                pass

    def check_remote_metadata(self, agent, descs=None):
        with self._lock:
            return agent in self._remotes

    def make_connection(self, remote_agent, backends=[]):
        """Open the peer's inbox now (optional; the first notification would)."""
        ra = self._remote(remote_agent)
        self.engine._peer(ra.inbox)

    def _refuse(self, what):
        raise MoriError(MORI_ENOTSUP, "%s: mori has no metadata listener or server; exchange "
                                      "get_agent_metadata() out of band and call add_remote_agent" % what)

    def send_local_metadata(self, ip_addr="", port=DEFAULT_COMM_PORT):
        self._refuse("send_local_metadata")

    def fetch_remote_metadata(self, remote_agent, ip_addr="", port=DEFAULT_COMM_PORT, label=""):
        self._refuse("fetch_remote_metadata")

    def send_partial_agent_metadata(self, descs, inc_conn_info=False, backends=[], ip_addr="",
                                    port=DEFAULT_COMM_PORT, label=""):
        self._refuse("send_partial_agent_metadata")

    def get_partial_agent_metadata(self, descs, inc_conn_info=False, backends=[]):
        self._refuse("get_partial_agent_metadata")

    def invalidate_local_metadata(self, ip_addr="", port=DEFAULT_COMM_PORT):
        self._refuse("invalidate_local_metadata")

    def prep_mem_view(self, dlist, *, backends=None):
        raise MoriError(MORI_ENOTSUP, "prep_mem_view: UCX's GPU device API is not part of mori")

    def release_mem_view(self, mvh):
        raise MoriError(MORI_ENOTSUP, "release_mem_view: UCX's GPU device API is not part of mori")

    def estimate_xfer_cost(self, req_handle):
        raise MoriError(MORI_ENOTSUP, "estimate_xfer_cost: not supported by mori")

    def _loopback(self):
        """This agent as the target of its own notifications (loopback transfers)."""
        with self._lock:
            if self._self is None:
                self._self = _RemoteAgent(self.name, self.engine.node, self._inbox, self._local)
            return self._self

    def _remote(self, name):
        if name == self.name:
            return self._loopback()
        with self._lock:
            ra = self._remotes.get(name)
        if ra is None:
            raise MoriError(MORI_ENOENT, "unknown remote agent %r (add_remote_agent first)" % name)
        return ra

    # ---- transfers ----

    def prep_xfer_dlist(self, agent_name, xfer_list, mem_type=None, backends=[]):
        """Prepare one side of transfers: agent_name NIXL_INIT_AGENT (or "") for local
        descriptors, a remote agent's name for its descriptors, or this agent's own name for
        loopback. Each descriptor must lie inside one registered region of that agent
        (MORI_ENOENT otherwise)."""
        dl = self.get_xfer_descs(xfer_list, mem_type)
        if agent_name in (NIXL_INIT_AGENT, "", None):
            with self._lock:
                regs = self._local
            reg, off = regs.resolve(dl.descs, "this agent")
            return nixl_prepped_dlist_handle(self, _Side(None, None, regs, reg, off, dl.descs[:, 1].copy(),
                                                         dl.mem_type))
        if agent_name == self.name:
            with self._lock:
                regs = self._local
            reg, off = regs.resolve(dl.descs, "this agent")
            return nixl_prepped_dlist_handle(self, _Side(agent_name, "self", regs, reg, off,
                                                         dl.descs[:, 1].copy(), dl.mem_type))
        ra = self._remote(agent_name)
        reg, off = ra.regions.resolve(dl.descs, "agent %r" % agent_name)
        return nixl_prepped_dlist_handle(self, _Side(agent_name, ra, ra.regions, reg, off, dl.descs[:, 1].copy(),
                                                     dl.mem_type))

    def release_dlist_handle(self, handle):
        handle.release()

    @staticmethod
    def _side_of(h, what):
        if not isinstance(h, nixl_prepped_dlist_handle):
            raise MoriError(MORI_EINVAL, "%s: not a prepared list handle" % what)
        if h._side is None:
            raise MoriError(MORI_ENOENT, "%s: the prepared list was released" % what)
        return h._side

    def _groups(self, lside, li, rside, ri, merge):
        """Pair descriptors, group them by (local region, remote region) and build one mori
        descriptor array per group (contiguous neighbours merged)."""
        ln = lside.len[li]
        if not np.array_equal(ln, rside.len[ri]):
            i = int(np.nonzero(ln != rside.len[ri])[0][0])
            raise MoriError(MORI_EINVAL, "pair %d: local descriptor of %d bytes, remote of %d" % (
                i, int(ln[i]), int(rside.len[ri][i])))
        lreg, rreg = lside.reg[li].astype(np.int64), rside.reg[ri].astype(np.int64)
        key = lreg * max(len(rside.regions.rows), 1) + rreg
        order = np.argsort(key, kind="stable")
        key, lo, ro, ln = key[order], lside.off[li][order], rside.off[ri][order], ln[order]
        cuts = np.nonzero(np.diff(key))[0] + 1
        groups, ndescs = [], 0
        for s, e in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(key)]))):
            glo, gro, gln = lo[s:e], ro[s:e], ln[s:e]
            if merge and e - s > 1:
                brk = np.ones(e - s, dtype=bool)
                brk[1:] = (glo[1:] != glo[:-1] + gln[:-1]) | (gro[1:] != gro[:-1] + gln[:-1])
                starts = np.nonzero(brk)[0]
                glo, gro, gln = glo[starts], gro[starts], np.add.reduceat(gln, starts)
            d = np.empty((len(glo), 3), dtype=np.uint64)
            d[:, 0], d[:, 1], d[:, 2] = glo, gro, gln
            k = int(key[s])
            lrow = lside.regions.rows[k // max(len(rside.regions.rows), 1)]
            rrow = rside.regions.rows[k % max(len(rside.regions.rows), 1)]
            groups.append((lrow[4], rrow[4], d))
            ndescs += len(glo)
        return groups, ndescs

    @staticmethod
    def _indices(ix, n, what):
        a = np.asarray(ix, dtype=np.int64).reshape(-1)
        if a.size and (a.min() < 0 or a.max() >= n):
            bad = int(a[(a < 0) | (a >= n)][0])
            raise MoriError(MORI_ERANGE, "%s index %d outside the prepared list of %d" % (what, bad, n))
        return a

    def make_prepped_xfer(self, operation, local_xfer_side, local_indices, remote_xfer_side, remote_indices,
                          notif_msg=b"", backends=[], skip_desc_merge=False):
        """A transfer request pairing local_indices[i] with remote_indices[i] of two prepared
        lists (equal lengths). notif_msg reaches the remote agent once every byte has moved."""
        if operation not in ("READ", "WRITE"):
            raise MoriError(MORI_EINVAL, "operation must be READ or WRITE, not %r" % (operation,))
        ls = self._side_of(local_xfer_side, "local side")
        rs = self._side_of(remote_xfer_side, "remote side")
        if ls.agent_name is not None:
            raise MoriError(MORI_EINVAL, "local side must be prepared with NIXL_INIT_AGENT")
        if rs.agent_name is None:
            raise MoriError(MORI_EINVAL, "remote side must be prepared with a remote (or this) agent's name")
        li = self._indices(local_indices, len(ls.reg), "local")
        ri = self._indices(remote_indices, len(rs.reg), "remote")
        if len(li) != len(ri):
            raise MoriError(MORI_EINVAL, "%d local indices, %d remote" % (len(li), len(ri)))
        if len(li) == 0:
            raise MoriError(MORI_EINVAL, "empty transfer")
        groups, nd = self._groups(ls, li, rs, ri, not skip_desc_merge)
        remote = rs.remote if isinstance(rs.remote, _RemoteAgent) else self._loopback()
        x = _Xfer(operation, groups, remote, bytes(notif_msg.encode() if isinstance(notif_msg, str) else notif_msg),
                  nd, int(ls.len[li].sum()))
        return nixl_xfer_handle(self, x)

    def initialize_xfer(self, operation, local_descs, remote_descs, remote_agent, notif_msg=b"", backends=[]):
        """Both lists prepared and paired in order: one call for make_prepped_xfer's work."""
        lh = self.prep_xfer_dlist(NIXL_INIT_AGENT, local_descs)
        rh = self.prep_xfer_dlist(remote_agent, remote_descs)
        n = len(lh._side.reg)
        return self.make_prepped_xfer(operation, lh, np.arange(n), rh, np.arange(len(rh._side.reg)), notif_msg)

    def transfer(self, handle, notif_msg=b""):
        """Post the transfer: "DONE" if it completed during the call, "PROC" if it runs on,
        raising MoriError when it cannot be posted. A handle can be posted again once done."""
        x = self._xfer_of(handle)
        if x.state == "PROC":
            raise MoriError(MORI_EBUSY, "transfer: the request is still in progress")
        msg = notif_msg or x.notif_msg
        if isinstance(msg, str):
            msg = msg.encode()
        for st in x.statuses:
            st.close()
        x.statuses, x.error, x.pending_msg = [], None, (msg or None)
        x.t_start = time.time()
        t0 = time.perf_counter()
        try:
            for lm, rm, d in x.groups:
                x.statuses.append(self.engine.batch_descs(x.op, lm, rm, d, notify=False))
        except MoriError as e:
            for st in x.statuses:
                st.close()
            x.statuses, x.state, x.error = [], "ERR", e
            raise
        x.t_post = time.perf_counter() - t0
        x._t0 = t0
        x.state = "PROC"
        with self._lock:
            self._live.add(x)
        return self._progress(x)

    def _xfer_of(self, handle):
        if not isinstance(handle, nixl_xfer_handle):
            raise MoriError(MORI_EINVAL, "not a transfer handle")
        if handle._released or handle._x is None:
            raise MoriError(MORI_ENOENT, "the transfer handle was released")
        return handle._x

    def _progress(self, x):
        with self._lock:  # one thread moves a request to DONE and sends its message
            return self._progress_locked(x)

    def _progress_locked(self, x):
        if x.state != "PROC":
            return x.state
        for st in x.statuses:
            if not st.done:
                return "PROC"
        x.t_done = time.perf_counter() - x._t0
        bad = [st for st in x.statuses if st.code != MORI_OK]
        with self._lock:
            self._live.discard(x)
        if bad:
            x.state, x.error = "ERR", bad[0].error
            return "ERR"
        x.state = "DONE"
        if x.pending_msg is not None and x.remote is not None:
            msg, x.pending_msg = x.pending_msg, None
            try:
                self._send(x.remote, msg)
            except MoriError as e:
                x.state, x.error = "ERR", e
        return x.state

    def check_xfer_state(self, handle):
        """ "DONE", "PROC" or "ERR" (handle.error then says why)."""
        return self._progress(self._xfer_of(handle))

    def get_xfer_telemetry(self, handle):
        x = self._xfer_of(handle)
        return nixlXferTelemetry(int(x.t_start * 1e6), int(x.t_post * 1e6), int(x.t_done * 1e6), x.nbytes, x.ndescs)

    def query_xfer_backend(self, handle):
        self._xfer_of(handle)
        return "MORI"

    def release_xfer_handle(self, handle):
        """Free the request; a running one is cancelled first."""
        handle.release()

    def _release_xfer(self, handle):
        x = handle._x
        if x is None:
            return
        for st in x.statuses:
            st.cancel()
            st.close()
        with self._lock:
            self._live.discard(x)
        handle._x = None

    # ---- notifications ----

    def _send(self, ra, msg, kind=0):
        """Send msg to ra's inbox as tagged 1-byte writes (the module docstring says how); one
        message at a time, so that the chunks of two threads' messages never interleave."""
        with self._lock:
            self._send_locked(ra, msg, kind)

    def _send_locked(self, ra, msg, kind):
        if not ra.named and kind == 0:
            self._send_locked(ra, self.name.encode(), _F_NAME)
            ra.named = True
        msg = bytes(msg)
        chunks = [msg[i:i + _CHUNK] for i in range(0, len(msg), _CHUNK)] or [b""]
        tags = []
        for i, ch in enumerate(chunks):
            flags = kind | (_F_START if i == 0 else 0) | (_F_END if i == len(chunks) - 1 else 0)
            tags.append((_TAG_MAGIC << 60) | (self._sender << 38) | (flags << 35) | (len(ch) << 32) |
                        int.from_bytes(ch.ljust(_CHUNK, b"\0"), "little"))
        self.engine._tag_writes(self._inbox, ra.inbox, tags)

    def send_notif(self, remote_agent_name, notif_msg, backend=None):
        """A notification not bound to a transfer."""
        if isinstance(notif_msg, str):
            notif_msg = notif_msg.encode()
        self._send(self._remote(remote_agent_name), notif_msg)

    def get_new_notifs(self, backends=[]):
        """{sender agent name: [message bytes, ...]} of the messages completed since the last call."""
        with self._lock:
            return self._get_new_notifs_locked()

    def _get_new_notifs_locked(self):
        out = {}
        for x in list(self._live):
            self._progress_locked(x)
        for n in self.engine.poll_notifications():
            if n.tag >> 60 != _TAG_MAGIC:
                self.raw_notifs.append(n)
                continue
            sender = (n.tag >> 38) & 0x3FFFFF
            flags = (n.tag >> 35) & 7
            ln = min((n.tag >> 32) & 7, _CHUNK)
            data = (n.tag & 0xFFFFFFFF).to_bytes(4, "little")[:ln]
            key = (n.from_pid, sender)
            if flags & _F_START:
                self._rx[key] = bytearray()
            buf = self._rx.get(key)
            if buf is None:
                continue  # the start was lost (a cancelled sender): drop the rest
            buf += data
            if flags & _F_END:
                del self._rx[key]
                if flags & _F_NAME:
                    self._names[key] = buf.decode("utf-8", "replace")
                else:
                    out.setdefault(self._names.get(key, "?"), []).append(bytes(buf))
        return out

    def update_notifs(self, backends=[]):
        for k, v in self.get_new_notifs().items():
            self.notifs.setdefault(k, []).extend(v)
        return self.notifs

    def check_remote_xfer_done(self, remote_agent_name, lookup_tag, backends=[], tag_is_prefix=True):
        self.update_notifs()
        msgs = self.notifs.get(remote_agent_name, [])
        for m in msgs:
            if (tag_is_prefix and m.startswith(lookup_tag)) or (not tag_is_prefix and lookup_tag in m):
                msgs.remove(m)
                return True
        return False

    # ---- life cycle ----

    def close(self):
        """Close the agent's engine (every registration and opened region with it)."""
        self.engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


__all__ = ["nixl_agent", "nixl_agent_config", "nixl_xfer_handle", "nixl_prepped_dlist_handle", "nixlXferTelemetry",
           "nixlRegDList", "nixlXferDList", "nixl_thread_sync_t", "NIXL_INIT_AGENT", "DEFAULT_COMM_PORT"]
