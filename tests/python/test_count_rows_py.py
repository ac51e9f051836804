# SPDX-License-Identifier: Apache-2.0
"""The count exchange (p2pt_count_rows_async) through the package, over the
fake driver of tests/fault (a CPU stands in for the GPU, its kernels do
nothing): Handle.count_rows reaches the library with its arguments in
order (the handle counts one exchange and one kernel of a CTA a
destination), its dry run names the path "count", and a bad argument comes
back as p2pt.Error naming it. What the kernel computes is tested on GPUs
(tests/test_count_rows.c)."""
import os

import pytest
from conftest import run_python

SCRIPT = r"""
import ctypes, sys, p2pt
lib = ctypes.CDLL(sys.argv[1])
gpa = lib.cuGetProcAddress_v2
gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                ctypes.c_void_p]
def entry(name, ver, *args):
    fn = ctypes.c_void_p()
    assert gpa(name.encode(), ctypes.byref(fn), ver, 0, None) == 0, name
    return ctypes.CFUNCTYPE(ctypes.c_int, *args)(fn.value)
P = ctypes.c_void_p
assert entry("cuInit", 2000, ctypes.c_uint)(0) == 0
dev, ctx, mem = ctypes.c_int(), P(), ctypes.c_uint64()
assert entry("cuDeviceGet", 2000, P, ctypes.c_int)(ctypes.byref(dev), 0) == 0
assert entry("cuDevicePrimaryCtxRetain", 7000, P, ctypes.c_int)(ctypes.byref(ctx), dev) == 0
assert entry("cuCtxSetCurrent", 4000, P)(ctx) == 0
assert entry("cuMemAlloc", 3020, P, ctypes.c_size_t)(ctypes.byref(mem), 1 << 20) == 0
routing, upto, puts, sem = mem.value, mem.value + 65536, mem.value + 131072, mem.value + 196608
h = p2pt.Handle(transport="ce")
c = h.explain_count_rows(routing, 4096, 3, upto, [puts, puts + 24], [sem])
print("explain", c.transport, c.path)
h.count_rows(routing, 4096, 3, upto, [puts, puts + 24], [sem])
h.count_rows(0, 0, 3, None, [puts], [])
p = h.properties()
print("counted", p["count_exchanges"], p["kernel_launches"], p["max_grid"])
for args, words in (((routing, 16, 0, upto, [puts], [sem]), "cols 0"),
                    ((routing, 16, 3, upto + 4, [puts], [sem]), "upto"),
                    ((routing, 16, 3, upto, [puts + 4], [sem]), "puts[0]"),
                    ((routing, 16, 3, upto, [puts], [sem + 8]), "signals[0]")):
    try:
        h.count_rows(*args)
        print("accepted", words)
    except p2pt.Error as e:
        print("refused", e.status, words in e.text)
h.close()
"""


def _fake(root, name, env):
    path = os.environ.get(env) or os.path.join(root, "build", name)
    if not os.path.exists(path):
        pytest.skip(f"no {name}: build the tests (-DP2PT_BUILD_TESTS=ON) into build/, or set "
                    f"{env}")
    return path


def test_count_rows_reaches_the_library_in_order_and_names_bad_arguments(root):
    cuda = _fake(root, "libp2pt_fake_cuda.so", "P2PT_FAKE_CUDA")
    nvrtc = _fake(root, "libp2pt_fake_nvrtc.so", "P2PT_FAKE_NVRTC")
    r = run_python(SCRIPT, cuda, P2P_CUDA_LIBRARY=cuda, P2P_NVRTC_LIBRARY=nvrtc,
                   P2P_TRANSPORT_CACHE_DIR="off")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split("\n")[:6] == ["explain tma count", "counted 2 2 3",
                                        "refused 4 True", "refused 4 True", "refused 4 True",
                                        "refused 4 True"], r.stdout + r.stderr
