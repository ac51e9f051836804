# SPDX-License-Identifier: Apache-2.0
"""Finding and loading libp2pt.so, the C signatures, and p2pt.Error.

How libp2pt.so is found (the first that exists wins, once per process):

1. ``libp2pt.so`` inside the installed package (next to this file), which
   ``pip install`` puts there;
2. else the path in the environment variable ``P2PT_LIBRARY``;
3. else ``libp2pt.so.0``, then ``libp2pt.so``, by the dynamic loader's own
   search (``LD_LIBRARY_PATH``, the ldconfig cache, the system directories).

A source tree run without ``pip install`` therefore needs ``P2PT_LIBRARY``
(e.g. ``build/libp2pt.so``) or the build directory on ``LD_LIBRARY_PATH``.
When none loads, ``p2pt.load()`` raises OSError naming every path tried.
"""
import ctypes
import enum
import operator
import os
import threading

from . import _structs as S

_lib = None
_lib_path = None
_lock = threading.Lock()


class Status(enum.IntEnum):
    """p2pt_status (P2PT_STATUS_MAP in p2pt.h)."""
    SUCCESS = 0
    CUDA_ERROR = 1
    SYSTEM_ERROR = 2
    INTERNAL_ERROR = 3
    INVALID_ARGUMENT = 4
    INVALID_USAGE = 5
    NOT_SUPPORTED = 6
    NO_DRIVER = 7
    COMPILE_ERROR = 8


class Error(RuntimeError):
    """A failed p2pt call: `status` (int), `status_name` ("NO_DRIVER") and
    `text`, p2pt's own explanation (the bad value, the CUDA error name)."""

    def __init__(self, status, text):
        try:
            name = Status(status).name
        except ValueError:
            name = "UNKNOWN"
        super().__init__(f"p2pt status {status} ({name}): {text}")
        self.status = int(status)
        self.status_name = name
        self.text = text


# Shown as p2pt.Error and p2pt.Status (in tracebacks and reprs), where
# users catch them, not under the private module that defines them.
Status.__module__ = "p2pt"
Error.__module__ = "p2pt"


def candidates():
    """Where load() looks, in order."""
    here = os.path.dirname(os.path.abspath(__file__))
    shipped = os.path.join(here, "libp2pt.so")
    if os.path.exists(shipped):
        yield shipped
    env = os.environ.get("P2PT_LIBRARY")
    if env:
        yield env
    yield "libp2pt.so.0"
    yield "libp2pt.so"


def _checked(base, what, bits, signed):
    """`base` whose arguments are refused out of its range: plain ctypes
    wraps -1 into a size_t of 2**64 - 1 and 2**32 + 1 into a uint32_t of
    1, which the library would take for a different, valid value. ctypes
    raises the refusal as ArgumentError ("argument N: ValueError: ...")."""
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)

    def from_param(cls, v):
        if isinstance(v, base):  # a ctypes value already
            return v
        v = operator.index(v)  # an int, a numpy or 0-d tensor integer; else TypeError
        if not lo <= v <= hi:
            raise ValueError(f"{v!r} does not fit {what} ({lo} to {hi})")
        return cls(v)

    return type(base.__name__, (base,), {"from_param": classmethod(from_param), "plain": base})


_P = ctypes.c_void_p
_I = _checked(ctypes.c_int, "an int", 8 * ctypes.sizeof(ctypes.c_int), True)
_U32 = _checked(ctypes.c_uint32, "a uint32_t", 32, False)
_UINT = _checked(ctypes.c_uint, "an unsigned int", 8 * ctypes.sizeof(ctypes.c_uint), False)
_SZ = _checked(ctypes.c_size_t, "a size_t", 8 * ctypes.sizeof(ctypes.c_size_t), False)
_DESCS = ctypes.POINTER(S.CopyDesc)
_SIGNATURES = {
    "p2pt_init": (_I, [ctypes.POINTER(S.InitArgs), ctypes.POINTER(_P)]),
    "p2pt_finalize": (_I, [_P]),
    "p2pt_get_properties": (_I, [_P, ctypes.POINTER(S.Properties)]),
    "p2pt_prepare": (_I, [_P, _I]),
    "p2pt_copy_async": (_I, [_P, _P, _P, _SZ, _P]),
    "p2pt_copy_batch_async": (_I, [_P, _DESCS, _SZ, _P]),
    "p2pt_window_register": (_I, [_P, _I, _P, _SZ]),
    "p2pt_window_unregister": (_I, [_P, _I, _P]),
    "p2pt_batch_workspace_bytes": (_SZ, [_U32]),
    "p2pt_copy_batch_device_async": (_I, [_P, _P, _P, _U32, _P, _P]),
    "p2pt_explain_copy": (_I, [_P, _P, _P, _SZ, _P, ctypes.POINTER(S.Choice)]),
    "p2pt_explain_batch": (_I, [_P, _DESCS, _SZ, _P, ctypes.POINTER(S.Choice)]),
    "p2pt_explain_batch_device": (_I, [_P, _P, _P, _U32, _P, _P, ctypes.POINTER(S.Choice)]),
    "p2pt_signal_async": (_I, [_P, _P, _P]),
    "p2pt_wait_async": (_I, [_P, _P, _U32, _P]),
    "p2pt_copy_batch_device_signal_async": (_I, [_P, _P, _P, _U32, _P, ctypes.POINTER(_P),
                                                 _U32, _P]),
    "p2pt_copy_batch_device_marks_async": (_I, [_P, _P, _P, _U32, _P, ctypes.POINTER(_P),
                                                _U32, _U32, _P]),
    "p2pt_count_rows_async": (_I, [_P, _P, _U32, _U32, _P, ctypes.POINTER(_P), _U32,
                                   ctypes.POINTER(_P), _U32, _P]),
    "p2pt_explain_count_rows": (_I, [_P, _P, _U32, _U32, _P, ctypes.POINTER(_P), _U32,
                                     ctypes.POINTER(_P), _U32, _P, ctypes.POINTER(S.Choice)]),
    "p2pt_explain_signal": (_I, [_P, _P, _P, ctypes.POINTER(S.Choice)]),
    "p2pt_explain_wait": (_I, [_P, _P, _U32, _P, ctypes.POINTER(S.Choice)]),
    "p2pt_copy_blocks_async": (_I, [_P, _P, _SZ, _P, _SZ, _P]),
    "p2pt_explain_blocks": (_I, [_P, _P, _SZ, _P, _SZ, _P, ctypes.POINTER(S.Choice)]),
    "p2pt_copy_blocks_device_async": (_I, [_P, _P, _SZ, _P, _U32, _P, _P]),
    "p2pt_blocks_workspace_bytes": (_SZ, [_SZ, _U32]),
    "p2pt_block_layout_create": (_I, [_P, _SZ, ctypes.POINTER(_P)]),
    "p2pt_block_layout_destroy": (_I, [_P]),
    "p2pt_block_layout_check": (_I, [_P, _P, _SZ, _P]),
    "p2pt_block_layout_swap": (_I, [_P, _P, _P, _SZ, _UINT, _P, _P]),
    "p2pt_status_string": (ctypes.c_char_p, [_I]),
    "p2pt_last_error": (ctypes.c_char_p, [_P]),
    "p2pt_peer_enable": (_I, [_P, _I, _I]),
    "p2pt_topology": (_I, [_P, ctypes.POINTER(S.Topology)]),
    "p2pt_share_export": (_I, [_P, _P, _SZ, ctypes.POINTER(S.ShareBlob),
                               ctypes.POINTER(ctypes.c_size_t)]),
    "p2pt_share_unexport": (_I, [_P, _P]),
    "p2pt_share_import": (_I, [_P, _I, ctypes.POINTER(S.ShareBlob), _SZ, ctypes.POINTER(_P),
                               ctypes.POINTER(_P)]),
    "p2pt_share_close": (_I, [_P, _P]),
}


def load():
    """The library, loaded once; OSError naming every path tried."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidates():
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            for name, (res, args) in _SIGNATURES.items():
                fn = getattr(lib, name)
                # A result of a subclass would come back as a ctypes object.
                fn.restype, fn.argtypes = getattr(res, "plain", res), args
            _lib, _lib_path = lib, path
            return lib
        raise OSError("cannot load libp2pt: install the package with pip, or set "
                      "P2PT_LIBRARY to the path of libp2pt.so. Tried: " + "; ".join(tried))


def library_path():
    """The path (or name) the library was loaded from."""
    load()
    return _lib_path


def plugin_table():
    """The exported p2pt_plugin_v1 table (readable with no driver)."""
    return S.PluginV1.in_dll(load(), "p2pt_plugin_v1")


def last_error():
    """The calling thread's last p2pt error text ("" when none)."""
    return (load().p2pt_last_error(None) or b"").decode(errors="replace")


def status_string(status):
    """p2pt's text for a status code."""
    return load().p2pt_status_string(int(status)).decode()


def check(status):
    if status != 0:
        raise Error(status, last_error())
