# SPDX-License-Identifier: Apache-2.0
"""The package on any machine, GPU or not: it imports, finds its library,
reports the header's version with no driver, and turns failures into
p2pt.Error with the status, its name and p2pt's text."""
import os
import re

import p2pt
import pytest
from conftest import run_python


def header_version(root):
    text = open(os.path.join(root, "include", "p2pt.h")).read()
    return ".".join(re.search(rf"^#define P2PT_VERSION_{p} +(\d+)", text, re.M).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))


def test_version_is_the_headers_and_the_librarys(root):
    assert p2pt.__version__ == header_version(root)
    table = p2pt.plugin_table()
    assert table.version.decode() == p2pt.__version__
    assert table.abi_version == 1 and table.name == b"p2pt"


def test_installed_package_loads_the_library_it_ships(installed):
    if not installed:
        pytest.skip("needs an installed package: the one under test is this source tree's")
    here = os.path.dirname(os.path.abspath(p2pt.__file__))
    assert p2pt.library_path() == os.path.join(here, "libp2pt.so")
    from p2pt import _build_version  # written by the build, not read from a source tree
    assert _build_version.version == p2pt.__version__


def test_installed_metadata_has_the_headers_version(root, installed):
    # pyproject.toml reads the version from include/p2pt.h with a regex; a
    # header reformatted past that regex would ship a wheel of another version.
    if not installed:
        pytest.skip("needs an installed package: a source tree has no distribution metadata")
    from importlib import metadata
    assert metadata.version("p2pt") == header_version(root) == p2pt.__version__


def test_installed_metadata_names_the_license_the_authors_and_the_project_urls(installed):
    # What `pip show p2pt` prints: pip before 25 shows the License field
    # alone (not License-Expression); pip 23 shows Project-URL only with -v,
    # later ones take their Home-page from the Homepage URL.
    if not installed:
        pytest.skip("needs an installed package: a source tree has no distribution metadata")
    from importlib import metadata
    md = metadata.metadata("p2pt")
    assert md["License"] == "Apache-2.0", md["License"]
    assert md["Author"] == "The p2pt authors", md["Author"]
    urls = dict(u.split(", ", 1) for u in md.get_all("Project-URL") or [])
    assert sorted(urls) == ["Changelog", "Documentation", "Homepage", "Source"], urls


def test_no_driver_is_status_7_naming_the_library():
    r = run_python("import p2pt\ntry:\n    p2pt.Handle(transport='tma')\n"
                   "except p2pt.Error as e:\n    print(e.status, e.status_name, e.text)\n",
                   P2P_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("7 NO_DRIVER "), r.stdout
    assert "/nonexistent/libcuda.so.1" in r.stdout


def test_bad_transport_is_status_4_naming_the_value():
    with pytest.raises(p2pt.Error) as e:
        p2pt.Handle(transport="bogus")
    assert (e.value.status, e.value.status_name) == (4, "INVALID_ARGUMENT")
    assert "bogus" in e.value.text and "bogus" in str(e.value)
    assert "bogus" in p2pt.last_error()


def test_bad_option_is_status_4_naming_the_item():
    with pytest.raises(p2pt.Error) as e:
        p2pt.Handle(options="P2P_TRANSPORT_STAGES=0")
    assert e.value.status == p2pt.Status.INVALID_ARGUMENT
    assert "P2P_TRANSPORT_STAGES" in e.value.text


def test_status_strings_come_from_the_library():
    assert p2pt.status_string(p2pt.Status.NO_DRIVER) == "no usable CUDA driver"
    assert p2pt.status_string(999) == "unknown status"
    assert p2pt.Error(999, "x").status_name == "UNKNOWN"


def test_workspace_bytes_needs_no_driver():
    # The status record alone, whatever the count (the kernel plans in
    # shared memory).
    assert p2pt.workspace_bytes(10) == 64
    assert p2pt.Handle.workspace_bytes(1 << 24) == 64


def test_an_int_out_of_its_c_type_is_refused_not_wrapped():
    # Plain ctypes would pass 2**32 + 1 as a uint32_t of 1 and -1 as a
    # size_t of 2**64 - 1: each is another valid value to the library.
    import ctypes
    from p2pt._handle import blocks_workspace_bytes
    one = p2pt.workspace_bytes(1)
    for bad in (2**32 + 1, -1):
        with pytest.raises(ctypes.ArgumentError, match=f"{bad} does not fit a uint32_t"):
            p2pt.workspace_bytes(bad)
    with pytest.raises(ctypes.ArgumentError, match="does not fit a size_t"):
        blocks_workspace_bytes(-1, 1)
    with pytest.raises(ctypes.ArgumentError, match="does not fit a uint32_t"):
        blocks_workspace_bytes(1, 2**32 + 1)
    with pytest.raises(ctypes.ArgumentError, match="does not fit an int"):
        p2pt.load().p2pt_status_string(2**32)
    assert p2pt.workspace_bytes(1) == one
    assert isinstance(blocks_workspace_bytes(1, 1), int)


def test_descriptors_and_layers_out_of_range_are_refused_not_wrapped():
    import struct
    from p2pt._handle import descs_array, layers_array
    with pytest.raises(ValueError, match="descriptor 1: bytes is 18446744073709551621"):
        descs_array([(0x1000, 0x2000, 8), (0x1000, 0x2000, 2**64 + 5)])
    with pytest.raises(ValueError, match="descriptor 0: dst is -1"):
        descs_array([(-1, 0x2000, 8)])
    with pytest.raises(ValueError, match="format 'd'"):
        descs_array(memoryview(struct.pack("3d", 1.0, 2.0, 3.0)).cast("d"))
    with pytest.raises(ValueError, match="layer 0: src_blocks is -1"):
        layers_array([(0x1000, 0x2000, 64, 4, -1)])
    assert descs_array([(None, 0x2000, 8)])[0].dst is None, "None stays a NULL address"


def test_descriptors_from_triples_buffers_and_arrays():
    a = p2pt.descs_array([(16, 32, 48), (64, 80, 96)])
    assert [(d.dst, d.src, d.bytes) for d in a] == [(16, 32, 48), (64, 80, 96)]
    b = p2pt.descs_array(bytes(a))
    assert [(d.dst, d.src, d.bytes) for d in b] == [(16, 32, 48), (64, 80, 96)]
    assert p2pt.descs_array(a) is a
    with pytest.raises(ValueError, match="24-byte"):
        p2pt.descs_array(b"\0" * 25)


def test_a_block_layout_needs_no_driver_and_checks_mappings_by_cell():
    """p2pt.BlockLayout: layers checked once with no handle or driver;
    check() names a bad cell and the range of ids, fills a record of every
    piece copied for a good mapping, and the layout serves mapping after
    mapping; bad layers are refused naming the layer."""
    import ctypes
    lay = p2pt.BlockLayout([(0x100000, 0x900000, 64, 6, 4), (0x200000, 0xA00000, 64, 6, 3)])
    assert lay.n_layers == 2 and lay.pointer
    good = (ctypes.c_int64 * 4)(0, 5, 2, 0)
    record = (ctypes.c_uint32 * 8)()
    lay.check(ctypes.addressof(good), 2, ctypes.addressof(record))
    assert list(record) == [4, 4, 0, 0xFFFFFFFF, 0, 0, 0, 0]
    bad = (ctypes.c_int64 * 2)(3, 0)
    with pytest.raises(p2pt.Error, match=r"block_mapping\[0, 0\] = 3: src block ids must be in "
                       r"\[0, 3\) \(src\[1\] has 3 blocks\)") as e:
        lay.check(ctypes.addressof(bad), 1)
    assert e.value.status == p2pt.Status.INVALID_ARGUMENT
    twice = (ctypes.c_int64 * 4)(0, 1, 2, 1)
    with pytest.raises(p2pt.Error, match="each destination block may appear once"):
        lay.check(ctypes.addressof(twice), 2)
    lay.check(ctypes.addressof(good), 1)
    assert lay.workspace_bytes(3) == p2pt.Handle.blocks_workspace_bytes(2, 3)
    lay.close()
    lay.close()
    with pytest.raises(p2pt.Error, match="layer 1: src is NULL with 3 blocks"):
        p2pt.BlockLayout([(0x100000, 0x900000, 64, 6, 4), (0x200000, 0, 64, 6, 3)])


def test_batch_status_reads_a_workspace_prefix():
    raw = (5).to_bytes(4, "little") + (4).to_bytes(4, "little") + (1).to_bytes(4, "little") + \
        (3).to_bytes(4, "little") + (p2pt.BATCH_SKIPPED_WINDOW).to_bytes(4, "little") + bytes(12)
    assert p2pt.read_batch_status(raw) == p2pt.BatchStatus(5, 4, 1, 3, 1)


def test_a_missing_library_names_every_path_tried(tmp_path, installed):
    if installed:
        pytest.skip("needs a source tree: an installed package always finds the library it ships")
    r = run_python("import p2pt\ntry:\n    p2pt.load()\nexcept OSError as e:\n    print(e)\n",
                   P2PT_LIBRARY=str(tmp_path / "libnothing.so"), LD_LIBRARY_PATH="")
    assert "libnothing.so" in r.stdout and "P2PT_LIBRARY" in r.stdout, r.stdout + r.stderr


def test_the_ctypes_layer_imports_no_third_party_module():
    r = run_python("import sys, p2pt\n"
                   "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


def test_options_as_a_dict_are_the_same_items_as_a_string():
    from p2pt._handle import options_text
    assert options_text({"P2P_TRANSPORT_STAGES": 2, "P2P_TRANSPORT_PDL": False}) == \
        "P2P_TRANSPORT_STAGES=2 P2P_TRANSPORT_PDL=0"
    assert options_text("P2P_TRANSPORT_STAGES=2") == "P2P_TRANSPORT_STAGES=2"
    assert options_text(None) is None
    with pytest.raises(ValueError, match="P2P_TRANSPORT_CACHE_DIR='/a b'"):
        options_text({"P2P_TRANSPORT_CACHE_DIR": "/a b"})
    with pytest.raises(TypeError, match="str or a dict"):
        options_text(["P2P_TRANSPORT_STAGES=2"])


def test_a_dict_option_reaches_the_library():
    # The value is checked before any driver is looked for, so a bad one
    # proves the dict was passed through on any machine.
    with pytest.raises(p2pt.Error) as e:
        p2pt.Handle(options={"P2P_TRANSPORT_STAGES": 0})
    assert e.value.status == p2pt.Status.INVALID_ARGUMENT
    assert "P2P_TRANSPORT_STAGES" in e.value.text and '"0"' in e.value.text


def test_a_misspelt_option_gets_the_nearest_name():
    with pytest.raises(p2pt.Error) as e:
        p2pt.Handle(options={"P2P_TRANSPORT_STAGE": 2})
    assert "did you mean P2P_TRANSPORT_STAGES?" in e.value.text


def test_the_error_is_shown_as_p2pt_error_with_its_status():
    import traceback
    with pytest.raises(p2pt.Error) as e:
        p2pt.Handle(transport="bogus")
    line = traceback.format_exception_only(type(e.value), e.value)[-1]
    assert line.startswith("p2pt.Error: p2pt status 4 (INVALID_ARGUMENT): "), line
    assert e.value.status == 4 and isinstance(e.value, RuntimeError)


def test_p2pt_torch_without_torch_is_one_line_saying_what_to_install():
    # p2pt is on no package index, so the advice is torch itself, or the
    # extra from the checkout that p2pt was installed from.
    r = run_python("import sys\nsys.modules['torch'] = None\nimport p2pt.torch\n")
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last == ("ImportError: p2pt.torch needs PyTorch: pip install torch "
                    "(or, in a p2pt checkout, pip install \".[torch]\")"), r.stderr
    assert "During handling" not in r.stderr, "no chained traceback"


def test_the_library_is_looked_for_where_the_docstring_says(monkeypatch):
    from p2pt import _lib
    here = os.path.dirname(os.path.abspath(_lib.__file__))
    monkeypatch.setenv("P2PT_LIBRARY", "/opt/x/libp2pt.so")
    monkeypatch.setattr(_lib.os.path, "exists", lambda p: True)
    assert list(_lib.candidates()) == [os.path.join(here, "libp2pt.so"), "/opt/x/libp2pt.so",
                                       "libp2pt.so.0", "libp2pt.so"]
    monkeypatch.setattr(_lib.os.path, "exists", lambda p: False)
    assert list(_lib.candidates()) == ["/opt/x/libp2pt.so", "libp2pt.so.0", "libp2pt.so"]
    monkeypatch.delenv("P2PT_LIBRARY")
    assert list(_lib.candidates()) == ["libp2pt.so.0", "libp2pt.so"]


def test_a_missing_auto_table_names_the_variable_that_pointed_at_it():
    # Read before any driver is looked for: the same on every machine.
    r = run_python("import p2pt\ntry:\n    p2pt.Handle(transport='auto', options={"
                   "'P2P_TRANSPORT_AUTO_TABLE': '/nonexistent/p2pt.table'})\n"
                   "except p2pt.Error as e:\n    print(e.status, e.text)\n",
                   P2P_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("4 P2P_TRANSPORT_AUTO_TABLE=/nonexistent/p2pt.table: cannot "
                               "open"), r.stdout
