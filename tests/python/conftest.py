"""Fixtures for the Python package's tests: morids in temporary runtime directories (one node,
or two nodes as two daemons on loopback with their own peer listeners, as tests/test_xnode.c
does), and peer processes (tests/python/peer.py) driven over JSON lines.

B (the build directory, as make was given it) says where morid and libmori are; the package
finds libmori there by the same variable."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_b = os.environ.get("B") or "build"
BUILD = _b if os.path.isabs(_b) else os.path.join(ROOT, _b)
MORID = os.path.join(BUILD, "morid")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)


def free_port():
    """A loopback port that binds now, below the ephemeral range (tests/harness.h's free_port: a
    port bind-to-0 gave could go to an outgoing connection before the daemon listens on it)."""
    import random
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        lo = 32768
    for _ in range(200 if lo > 11024 else 0):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", random.randrange(10000, lo)))
            return s.getsockname()[1]
        except OSError:
            continue
        finally:
            s.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Daemon:
    """A morid in its own runtime directory; addr is its peer listener (None without one)."""

    def __init__(self, listen=False, extra=()):
        self.dir = tempfile.mkdtemp(prefix="mori-py-")
        self.run = os.path.join(self.dir, "run")
        os.mkdir(self.run)
        self.log = os.path.join(self.dir, "morid.log")
        self.addr = "127.0.0.1:%d" % free_port() if listen else None
        self.extra = list(extra)
        self.proc = None
        self.start()

    def start(self):
        args = [MORID, "--foreground", "--runtime-dir", self.run, "--log-level", "info",
                "--transfer-timeout-ms", "10000"] + self.extra
        if self.addr:
            args += ["--listen", self.addr]
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        sock = os.path.join(self.run, "morid.session")
        if os.path.exists(sock):
            os.unlink(sock)
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(args, stderr=log, stdout=log, env=env)
        deadline = time.time() + 10
        while not os.path.exists(sock):
            if self.proc.poll() is not None:
                raise RuntimeError("morid exited (%s): %s" % (self.proc.returncode, self.tail()))
            if time.time() > deadline:
                raise RuntimeError("morid did not start: " + self.tail())
            time.sleep(0.01)
        time.sleep(0.05)  # the peer listener binds right after the session socket

    def tail(self):
        try:
            with open(self.log) as f:
                return "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def stop(self):
        """SIGTERM (SIGCONT first, in case a test left it stopped); the exit status, 0 when it
        closed every handle (None if it was already gone, -9 if it had to be killed)."""
        rc = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
        elif self.proc:
            rc = self.proc.returncode
        self.proc = None
        return rc

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def cleanup(self):
        """Stop, remove the directory; raise if morid did not exit 0 (a crash, a sanitizer
        report, a handle left open)."""
        rc = self.stop()
        tail = self.tail()
        if os.environ.get("KEEP_TMP") == "1":
            print("# kept", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        if rc not in (0, None):
            raise RuntimeError("morid exited %s; its log ends:\n%s" % (rc, tail))


@pytest.fixture(scope="module")
def daemon():
    if not os.access(MORID, os.X_OK):
        pytest.fail("%s is not built (make all B=...)" % MORID)
    d = Daemon()
    yield d
    d.cleanup()


@pytest.fixture(scope="module")
def nodes():
    """Two 'nodes': two morids on loopback, each with a peer listener."""
    a, b = Daemon(listen=True), Daemon(listen=True)
    yield a, b
    try:
        a.cleanup()
    finally:
        b.cleanup()


class Peer:
    """A process running tests/python/peer.py ROLE ...; call(op, **args) sends a JSON line and
    returns the JSON reply (raising on {"error": ...})."""

    def __init__(self, role, *args, env=None):
        e = dict(os.environ)
        e["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), HERE, e.get("PYTHONPATH", "")])
        e["PYTHONDONTWRITEBYTECODE"] = "1"
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        self.proc = subprocess.Popen([sys.executable, "-u", os.path.join(HERE, "peer.py"), role] + [str(a) for a in args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=e, text=True)
        self.hello = self._read()
        self.pid = self.proc.pid

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("peer exited (%s)" % self.proc.wait(5))
        r = json.loads(line)
        if isinstance(r, dict) and "error" in r:
            raise RuntimeError("peer: %s" % r["error"])
        return r

    def call(self, op, **kw):
        kw["op"] = op
        self.proc.stdin.write(json.dumps(kw) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.call("exit")
            except Exception:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill9(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def peer_factory():
    made = []

    def make(role, *args, **kw):
        p = Peer(role, *args, **kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.close()
