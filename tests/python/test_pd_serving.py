"""examples/pd_serving: a prefill and a decode worker over mori, against the same model run in
one process with the same prefill chunks. Tokens and last logits must be identical for every
request, with and without UMBP prefix reuse; a byte flipped in one request's KV after its
transfer must show as a mismatch (so the comparison can fail). CPU here (Debian's torch); CUDA
in tests/device-python.sh. Skips without torch."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch", reason="torch not installed (Debian: python3-torch)")

SERVE = os.path.join(ROOT, "examples", "pd_serving", "serve.py")
SMALL = ["--layers", "2", "--hidden", "128", "--heads", "4", "--kv-heads", "2", "--vocab", "256",
         "--tokens-per-id", "16", "--max-tokens", "256", "--output", "4"]


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def serve(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, SERVE] + SMALL + ["--device", DEVICE] + list(args), env=env, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def umbp_available():
    try:
        import mori.umbp  # noqa: F401
        return True
    except ImportError:
        return False


def test_identical_without_reuse(daemon):
    rc, out = serve("--runtime-dir", daemon.run, "--requests", "20", "--no-umbp")
    assert rc == 0 and "identical to the colocated reference for every request" in out, out
    assert "20 requests" in out


def test_identical_two_daemons(nodes):
    rc, out = serve("--prefill-runtime-dir", nodes[1].run, "--decode-runtime-dir", nodes[0].run,
                    "--requests", "6", "--no-umbp")
    assert rc == 0 and "identical" in out, out


def test_flipped_byte_is_caught(daemon):
    rc, out = serve("--runtime-dir", daemon.run, "--requests", "4", "--no-umbp", "--corrupt", "2")
    assert rc == 1 and "MISMATCH against the colocated reference in requests [2]" in out, out


@pytest.mark.skipif(not umbp_available(), reason="mori.umbp not in this build")
def test_identical_with_umbp_reuse(daemon):
    rc, out = serve("--runtime-dir", daemon.run, "--requests", "24")
    assert rc == 0 and "identical to the colocated reference for every request" in out, out
    reused = [l for l in out.splitlines() if l.strip().startswith("reuse")][0]
    assert " 0 requests reused" not in reused, out  # the workload shares prefixes: some must be reused


@pytest.mark.skipif(not umbp_available(), reason="mori.umbp not in this build")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_identical_with_umbp_reuse_dtypes(daemon, dtype):
    if DEVICE == "cpu" and dtype == "bf16":
        pytest.skip("bf16 runs on the GPU machine (CPU bf16 matmuls are slow in Debian's torch)")
    rc, out = serve("--runtime-dir", daemon.run, "--requests", "20", "--dtype", dtype, "--skip", "100")
    assert rc == 0 and "identical" in out, out


@pytest.mark.skipif(not umbp_available(), reason="mori.umbp not in this build")
def test_flipped_byte_is_caught_with_umbp(daemon):
    rc, out = serve("--runtime-dir", daemon.run, "--requests", "8", "--corrupt", "5")
    assert rc == 1 and "MISMATCH" in out and "[5]" in out, out
