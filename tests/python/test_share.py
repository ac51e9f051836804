# SPDX-License-Identifier: Apache-2.0
"""Memory shared between processes through the Python package, over the
fake driver of tests/fault (a CPU stands in for the GPU): a cuMemAlloc
range exports as one blob of SHARE_BLOB_BYTES bytes, imports (this very
process's memory, used where it is), closes and unexports through the
ctypes signatures; pageable memory is refused with status 6; a blob of the
wrong size is refused before the library is called. Each case runs in a
fresh interpreter: the driver is loaded once per process."""
import p2pt
import pytest
from conftest import FAKE_MEMORY, fake_library, run_python
from p2pt import _structs as S


def fake_driver(root):
    return fake_library(root, "libp2pt_fake_cuda.so", "P2PT_FAKE_CUDA")


SCRIPT = FAKE_MEMORY + r"""
h = p2pt.Handle(transport="ce")
blobs = h.share_export(mem.value + 4096, 65536)
print("blobs", len(blobs), len(blobs[0]))
ptr, imp = h.share_import(0, blobs)
print("ptr", ptr == mem.value + 4096)
print("props", h.properties()["share_imports_open"], h.properties()["share_exports"])
h.share_close(imp)
print("closed", h.properties()["share_imports_closed"])
h.share_unexport(mem.value + 4096)
buf = ctypes.create_string_buffer(4096)
try:
    h.share_export(ctypes.addressof(buf), 4096)
except p2pt.Error as e:
    print("pageable", e.status, "not memory CUDA knows" in e.text)
h.close()
"""


def test_export_import_close_unexport_through_the_package(root):
    fake = fake_driver(root)
    r = run_python(SCRIPT, fake, P2P_CUDA_LIBRARY=fake, P2P_TRANSPORT_CACHE_DIR="off")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split("\n")[:5] == [f"blobs 1 {S.SHARE_BLOB_BYTES}", "ptr True", "props 1 1",
                                        "closed 1", "pageable 6 True"], r.stdout + r.stderr


def test_a_blob_of_the_wrong_size_is_refused_before_the_library(monkeypatch):
    class NoLib:
        pass

    h = p2pt.Handle.__new__(p2pt.Handle)
    h._lib = NoLib()  # any call into it would fail with AttributeError
    with pytest.raises(ValueError, match="blob 0 has 10 bytes"):
        h.share_import(0, [b"x" * 10])
