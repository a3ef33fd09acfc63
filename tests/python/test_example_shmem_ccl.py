"""examples/shmem_ccl_host.py runs on host heaps: 3 processes as 3 PEs of one group, each checking
its neighbour's put, a ptr_p2p view, an all-reduce and an all-gather against numpy."""
import os
import subprocess
import sys

from conftest import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "shmem_ccl_host.py")


def test_example_shmem_ccl(daemon):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, EXAMPLE, "--runtime-dir", daemon.run, "--world-size", "3"], env=env,
                       capture_output=True, text=True, timeout=150)
    assert p.returncode == 0 and "example: ok" in p.stdout, p.stdout + p.stderr
    assert sum("all_gather checked" in line for line in p.stdout.splitlines()) == 3, p.stdout
