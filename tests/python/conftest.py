# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures of the pytest suite: the p2pt package under test (the
installed one, else python/ of this source tree), whether it is installed,
the source root and examples/ep_dispatch.py as a module (ep); and what
test modules import from here: code run in a fresh interpreter
(run_python), the fake driver's libraries (fake_library) and the start of
a script that allocates on it (FAKE_MEMORY)."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

try:
    import p2pt  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import p2pt  # noqa: F401


def run_python(code, *args, **env):
    """`code` in a fresh interpreter (the driver is loaded once per process),
    with `args` as its sys.argv[1:] and `env` added to the environment."""
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run([sys.executable, "-c", code, *args], env=full, capture_output=True,
                          text=True, timeout=60)


def fake_library(root, name, env):
    """tests/fault's library `name` (libp2pt_fake_cuda.so: a CPU stands in
    for the GPU; libp2pt_fake_nvrtc.so), from $env or build/; skips where
    it is not built."""
    path = os.environ.get(env) or os.path.join(root, "build", name)
    if not os.path.exists(path):
        pytest.skip(f"no {name}: build the tests (-DP2PT_BUILD_TESTS=ON) into build/, or set "
                    f"{env}")
    return path


# The start of a script run with the fake driver's path as sys.argv[1]: its
# context current on device 0 and 1 MiB of its memory at `mem.value`.
FAKE_MEMORY = r"""
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
"""


@pytest.fixture
def root():
    return ROOT


@pytest.fixture
def installed():
    """Whether the p2pt under test is an installed package (pip install .)
    rather than python/p2pt of this tree, told by where it was imported
    from: `pip install ".[test]" && pytest tests/python` tests the installed
    one, `PYTHONPATH=python pytest` or a tree without one the source."""
    source = os.path.realpath(os.path.join(ROOT, "python", "p2pt"))
    return os.path.dirname(os.path.realpath(p2pt.__file__)) != source


@pytest.fixture(scope="module")
def ep():
    """examples/ep_dispatch.py, imported (skips where it cannot be: it needs
    torch and torch.distributed)."""
    pytest.importorskip("torch")
    path = os.path.join(ROOT, "examples", "ep_dispatch.py")
    spec = importlib.util.spec_from_file_location("ep_dispatch_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except SystemExit as e:  # p2pt.distributed needs torch.distributed
        pytest.skip(str(e))
    return mod
