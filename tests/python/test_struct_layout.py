# SPDX-License-Identifier: Apache-2.0
"""The ctypes structures of the package match the C structs of p2pt.h and
p2pt_plugin.h: the same field names in the same order (read from the
headers), and the same offsets and sizes (printed by p2pt-struct-layout, a
program the CMake build makes with the tests). A field appended in C
without its Python twin fails here."""
import ctypes
import os
import re
import subprocess

import pytest
from p2pt import _structs as S


def c_struct_fields(root):
    """{typedef name: [field names]} of every struct of the public headers."""
    out = {}
    for h in ("p2pt.h", "p2pt_plugin.h"):
        text = open(os.path.join(root, "include", h)).read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        for body, name in re.findall(r"typedef struct \w+ \{(.*?)\} (\w+);", text, flags=re.S):
            fields = []
            for decl in body.split(";"):
                decl = " ".join(decl.split())
                if not decl:
                    continue
                m = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl) or re.search(r"(\w+)\s*(\[.*)?$", decl)
                fields.append(m.group(1))
            out[name] = fields
    return out


def probe_path(root):
    env = os.environ.get("P2PT_LAYOUT_PROBE")
    if env:
        assert os.access(env, os.X_OK), f"P2PT_LAYOUT_PROBE={env} is not an executable"
        return env
    for build in ("build", "build-asan"):
        path = os.path.join(root, build, "p2pt-struct-layout")
        if os.access(path, os.X_OK):
            return path
    pytest.skip("no p2pt-struct-layout: build with -DP2PT_BUILD_TESTS=ON, or set "
                "P2PT_LAYOUT_PROBE to its path")


def test_every_public_struct_has_a_ctypes_twin_with_the_same_fields(root):
    c = c_struct_fields(root)
    assert sorted(c) == sorted(S.C_NAMES)
    for name, fields in c.items():
        py = [f for f, _ in S.C_NAMES[name]._fields_]
        assert py == fields, f"{name}: C has {fields}, Python has {py}"


def test_offsets_and_sizes_match_the_compiled_structs(root):
    out = subprocess.run([probe_path(root)], capture_output=True, text=True, check=True).stdout
    seen = set()
    for line in out.splitlines():
        name, field, *nums = line.split()
        cls = S.C_NAMES[name]
        if field == "sizeof":
            assert ctypes.sizeof(cls) == int(nums[0]), f"sizeof {name}"
            continue
        desc = getattr(cls, field)
        assert (desc.offset, desc.size) == (int(nums[0]), int(nums[1])), \
            f"{name}.{field}: C offset {nums[0]} size {nums[1]}, " \
            f"ctypes offset {desc.offset} size {desc.size}"
        seen.add((name, field))
    # The probe itself must list every field the headers declare.
    missing = [(n, f) for n, fs in c_struct_fields(root).items() for f in fs
               if (n, f) not in seen]
    assert not missing, f"tests/python/struct_layout.c does not print {missing}"
