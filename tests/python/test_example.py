"""examples/kv_cache_transfer.py runs and verifies every block: one node, and two daemons
(torch where it is installed, numpy float16 otherwise; CPU here, CUDA in tests/device-python.sh)."""
import os
import subprocess
import sys

from conftest import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "kv_cache_transfer.py")


def run(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, EXAMPLE, "--requests", "6", "--layers", "4"] + list(args), env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "every block verified" in p.stdout, p.stdout + p.stderr
    return p.stdout


def test_example_one_node(daemon):
    out = run("--runtime-dir", daemon.run)
    assert "requests    6," in out


def test_example_two_nodes(nodes):
    run("--prefill-runtime-dir", nodes[1].run, "--decode-runtime-dir", nodes[0].run)
