"""mori.ir without a GPU: the bitcode and its table found in the build tree, the table's entries
as ROCm/mori's MORI_DEVICE_FUNCTIONS shapes them, the constants, the overrides. The Triton half
(mori.ir.triton) runs on the GPU machine (tests/device-ir.sh); here it is imported only where
Triton is installed."""
import json
import os

import pytest

import mori
from mori import ir
from conftest import BUILD

TABLE = os.path.join(BUILD, "kernels", "ir", "libmori_shmem_device.json")
BC = os.path.join(BUILD, "kernels", "ir", "libmori_shmem_device.bc")


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    for k in ("MORI_SHMEM_BC", "MORI_IR_DIR", "MORI_IR_TABLE", "MORI_GPU_ARCH"):
        monkeypatch.delenv(k, raising=False)
    ir._table = None
    yield
    ir._table = None


def test_table_from_the_build():
    if not os.path.isdir(os.path.join(BUILD, "kernels")):
        pytest.skip("%s is not a build tree and holds no MORI-IR table (a bundle without ir/)" % BUILD)
    assert os.path.isfile(TABLE), "make all builds the table (mk/ir.mk)"
    with open(TABLE) as f:
        raw = json.load(f)
    if not os.path.isfile(BC):
        pytest.skip("no bitcode in %s (clang-16 not installed: tools/install-deps); the table alone is "
                    "checked by tests/test_ir_bitcode.sh" % os.path.dirname(BC))
    assert ir.find_bitcode() == os.path.abspath(BC)
    t = ir.table()
    assert t["state_global"] == "mori_shmem_state_ptr" == ir.STATE_GLOBAL
    fs = ir.FUNCTIONS
    assert len(fs) == len(raw["functions"]) > 100
    # ROCm/mori's shape and a few of its signatures, by name (its ops.py)
    assert fs["putmem_nbi_signal_block"] == {
        "symbol": "mori_shmem_putmem_nbi_signal_block",
        "args": ["uint64", "uint64", "uint64", "uint64", "uint64", "int32", "int32", "int32"],
        "arg_names": ["dest", "source", "bytes", "sig_addr", "signal_value", "signal_op", "pe", "qp_id"],
        "ret": "int32"}
    assert fs["ptr_p2p"]["args"] == ["uint64", "int32", "int32"] and fs["ptr_p2p"]["ret"] == "uint64"
    assert fs["my_pe"]["args"] == [] and fs["my_pe"]["ret"] == "int32"
    assert all(f["symbol"] == ("mori_" + k if k.startswith(("coll_", "cco_")) else "mori_shmem_" + k) for k, f in fs.items())
    # MORI-CCL's device API (include/mori/device/coll.cuh's MORI_COLL_API) in the same table
    assert fs["coll_peer_ptr"] == {"symbol": "mori_coll_peer_ptr", "args": ["uint64", "uint64", "int32"],
                                   "arg_names": ["d", "p", "rank"], "ret": "uint64"}
    assert fs["coll_barrier_block"]["args"] == ["uint64"] and fs["coll_barrier_block"]["ret"] == "int32"
    # MORI-CCO's (include/mori/device/cco.cuh's MORI_CCO_API): the device communicator's address, windows as (off, bytes)
    assert fs["cco_gda_put_signal_add_block"] == {
        "symbol": "mori_cco_gda_put_signal_add_block",
        "args": ["uint64", "int32", "uint64", "uint64", "uint64", "uint64", "uint64", "uint64", "uint64", "int32", "uint64"],
        "arg_names": ["d", "peer", "dw_off", "dw_bytes", "doff", "sw_off", "sw_bytes", "soff", "bytes", "sig", "value"],
        "ret": "int32"}
    assert fs["cco_lsa_peer_ptr"]["ret"] == "uint64" and fs["cco_lsa_barrier_warp"]["args"] == ["uint64", "int32"]
    # ROCm/mori's and NVSHMEM's numbers; OpenSHMEM's comparisons
    assert (ir.SIGNAL_SET, ir.SIGNAL_ADD, ir.CMP_EQ, ir.CMP_GE) == (9, 10, 0, 3)
    with pytest.raises(AttributeError):
        ir.NOT_A_CONSTANT


def test_overrides(tmp_path, monkeypatch):
    fake = tmp_path / "x.bc"
    fake.write_bytes(b"BC")
    monkeypatch.setenv("MORI_SHMEM_BC", str(fake))
    assert ir.find_bitcode() == str(fake)
    monkeypatch.setenv("MORI_SHMEM_BC", str(tmp_path / "missing.bc"))
    with pytest.raises(FileNotFoundError, match="missing.bc"):
        ir.find_bitcode()
    # a directory with neither file: every place tried is named
    monkeypatch.delenv("MORI_SHMEM_BC")
    monkeypatch.setenv("MORI_IR_DIR", str(tmp_path))
    monkeypatch.setenv("B", str(tmp_path / "nobuild"))
    monkeypatch.setattr(ir, "_here", str(tmp_path))
    with pytest.raises(FileNotFoundError) as e:
        ir.find_bitcode()
    assert str(tmp_path) in str(e.value) and "clang-16" in str(e.value)
    # a table that is not MORI-IR's is refused
    bad = tmp_path / "t.json"
    bad.write_text('{"abi": "other", "functions": []}')
    monkeypatch.setenv("MORI_IR_TABLE", str(bad))
    with pytest.raises(ValueError, match="not a MORI-IR table"):
        ir.table()


def test_triton_wrappers():
    pytest.importorskip("triton", reason="Triton not installed here: mori.ir.triton runs in tests/device-ir.sh")
    if not os.path.isfile(BC):
        pytest.skip("no bitcode (clang-16 not installed)")
    from mori.ir import triton as mt
    for k in ir.FUNCTIONS:
        assert callable(getattr(mt, k))
    assert mt.extern_libs() == {"mori_shmem": os.path.abspath(BC)}


def test_package_attribute():
    assert mori.ir is ir


def test_bitcode_by_gpu(tmp_path, monkeypatch):
    """The file for the GPU found: AMD's per arch (KFD's gfx_target_version), NVIDIA's otherwise."""
    for name in ("libmori_shmem_device.bc", "libmori_shmem_device_gfx942.bc", "libmori_shmem_device_gfx90a.bc"):
        (tmp_path / name).write_bytes(b"BC")
    monkeypatch.setenv("MORI_IR_DIR", str(tmp_path))
    nodes = tmp_path / "nodes"
    monkeypatch.setattr(ir, "_KFD_NODES", str(nodes))
    assert ir.gpu_arch() is None  # no KFD: not an AMD machine
    assert ir.find_bitcode() == str(tmp_path / "libmori_shmem_device.bc")
    # node 0 a CPU (gfx_target_version 0), node 1 an MI300X (9.4.2), node 2 an MI250X (9.0.10)
    for n, v in ((0, 0), (1, 90402), (2, 90010)):
        (nodes / str(n)).mkdir(parents=True)
        (nodes / str(n) / "properties").write_text("cpu_cores_count 0\ngfx_target_version %d\nsimd_count 1216\n" % v)
    assert ir.gpu_arch() == "gfx942"
    assert ir.find_bitcode() == str(tmp_path / "libmori_shmem_device_gfx942.bc")
    assert ir.find_bitcode("gfx90a:sramecc+:xnack-") == str(tmp_path / "libmori_shmem_device_gfx90a.bc")
    assert ir.find_bitcode("sm_90") == str(tmp_path / "libmori_shmem_device.bc")
    monkeypatch.setenv("MORI_GPU_ARCH", "gfx90a")
    assert ir.find_bitcode() == str(tmp_path / "libmori_shmem_device_gfx90a.bc")
    with pytest.raises(FileNotFoundError, match="libmori_shmem_device_gfx950.bc"):
        ir.find_bitcode("gfx950")


def test_amd_bitcode_built():
    """Where the build made AMD bitcode (mk/ir.mk), mori.ir finds it by arch beside the NVIDIA file."""
    d = os.path.join(BUILD, "kernels", "ir")
    amd = sorted(f for f in os.listdir(d) if f.startswith("libmori_shmem_device_gfx")) if os.path.isdir(d) else []
    if not amd:
        pytest.skip("no AMD bitcode in %s (no hipcc or clang-19 here: tools/install-deps installs them)" % d)
    for f in amd:
        arch = f[len("libmori_shmem_device_"):-len(".bc")]
        assert ir.find_bitcode(arch) == os.path.abspath(os.path.join(d, f))
