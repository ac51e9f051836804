"""p2pt from Python, through ctypes: no build step, no dependency.

    import p2pt
    h = p2pt.Handle(transport="tma")            # p2pt_init
    h.prepare(0)                                # compile and load before capture
    h.copy(dst_ptr, src_ptr, nbytes, stream)    # p2pt_copy_async
    h.copy_batch(descs, stream)                 # [(dst, src, bytes), ...]
    h.window_register(0, base, nbytes)          # memory device batches may touch
    ws = h.workspace_bytes(max_count)           # GPU bytes for a device batch
    h.copy_batch_device(descs_ptr, count_ptr, max_count, ws_ptr, stream)

Pointers and streams are plain integers (torch: tensor.data_ptr(),
torch.cuda.current_stream().cuda_stream). Every failure raises p2pt.Error
with the status and p2pt's own explanation. The library is found through
P2PT_LIBRARY (a path), else libp2pt.so.0 / libp2pt.so on the loader's path,
else a build tree next to this file (build/, build-bench/).
"""
import ctypes
import os

__all__ = ["Error", "Handle", "load", "DESC_DTYPE_WORDS", "STATUS_FIELDS"]

# p2pt_copy_desc is three 64-bit words: dst, src, bytes.
DESC_DTYPE_WORDS = 3
# p2pt_batch_status, eight 32-bit words at the start of a workspace.
STATUS_FIELDS = ("count", "copied", "skipped", "first_bad", "reasons")

_lib = None


class Error(RuntimeError):
    def __init__(self, status, text):
        super().__init__(f"p2pt status {status}: {text}")
        self.status = status
        self.text = text


class _Desc(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_void_p), ("src", ctypes.c_void_p), ("bytes", ctypes.c_uint64)]


class _InitArgs(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("logger", ctypes.c_void_p),
                ("transport", ctypes.c_char_p), ("options", ctypes.c_char_p)]


class _Props(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("transport", ctypes.c_char_p),
                ("version", ctypes.c_char_p), ("abi_version", ctypes.c_uint32),
                ("driver_version", ctypes.c_int), ("chunk_bytes", ctypes.c_size_t),
                ("stages", ctypes.c_int), ("max_ctas", ctypes.c_int), ("validate", ctypes.c_int)] + \
               [(n, ctypes.c_uint64) for n in ("copies", "bytes", "tma_launches", "ce_copies",
                                               "ce_fallbacks", "compilations", "module_loads",
                                               "rejected", "cubin_cache_hits")] + \
               [("pdl", ctypes.c_int), ("batch_per_launch", ctypes.c_uint32),
                ("max_windows", ctypes.c_uint32), ("device_batch_max", ctypes.c_uint32),
                ("reserved0", ctypes.c_uint32)] + \
               [(n, ctypes.c_uint64) for n in ("batches", "batch_pieces", "device_batches",
                                               "batch_launches")]


def _candidates():
    env = os.environ.get("P2PT_LIBRARY")
    if env:
        yield env
        return
    yield "libp2pt.so.0"
    yield "libp2pt.so"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for build in ("build", "build-bench"):
        yield os.path.join(root, build, "libp2pt.so")


def load():
    """The library, loaded once (raises OSError naming every path tried)."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            tried.append(f"{path} ({e})")
    else:
        raise OSError("cannot load libp2pt; set P2PT_LIBRARY. Tried: " + "; ".join(tried))
    P, I, U64, U32, SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_size_t
    sig = {
        "p2pt_init": (I, [ctypes.POINTER(_InitArgs), ctypes.POINTER(P)]),
        "p2pt_finalize": (I, [P]),
        "p2pt_prepare": (I, [P, I]),
        "p2pt_copy_async": (I, [P, P, P, SZ, P]),
        "p2pt_copy_batch_async": (I, [P, ctypes.POINTER(_Desc), SZ, P]),
        "p2pt_copy_batch_device_async": (I, [P, P, P, U32, P, P]),
        "p2pt_batch_workspace_bytes": (SZ, [U32]),
        "p2pt_window_register": (I, [P, I, P, SZ]),
        "p2pt_window_unregister": (I, [P, I, P]),
        "p2pt_peer_enable": (I, [P, I, I]),
        "p2pt_get_properties": (I, [P, ctypes.POINTER(_Props)]),
        "p2pt_last_error": (ctypes.c_char_p, [P]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    _lib = lib
    return lib


def _check(status):
    if status != 0:
        raise Error(status, _lib.p2pt_last_error(None).decode(errors="replace"))


class Handle:
    """One p2pt handle (thread-safe; one serves any number of threads)."""

    def __init__(self, transport=None, options=None):
        lib = load()
        args = _InitArgs(ctypes.sizeof(_InitArgs), None,
                         transport.encode() if transport else None,
                         options.encode() if options else None)
        self._h = ctypes.c_void_p()
        _check(lib.p2pt_init(ctypes.byref(args), ctypes.byref(self._h)))

    def close(self):
        if self._h:
            _lib.p2pt_finalize(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def prepare(self, device):
        _check(_lib.p2pt_prepare(self._h, device))

    def peer_enable(self, a, b):
        _check(_lib.p2pt_peer_enable(self._h, a, b))

    def copy(self, dst, src, nbytes, stream=0):
        _check(_lib.p2pt_copy_async(self._h, dst, src, nbytes, stream or None))

    def copy_batch(self, descs, stream=0):
        """descs: a sequence of (dst, src, bytes) integer triples."""
        arr = (_Desc * len(descs))(*[_Desc(d, s, n) for d, s, n in descs])
        _check(_lib.p2pt_copy_batch_async(self._h, arr, len(descs), stream or None))

    def workspace_bytes(self, max_count):
        return _lib.p2pt_batch_workspace_bytes(max_count)

    def copy_batch_device(self, descs, count, max_count, workspace, stream=0):
        """descs, count, workspace: GPU addresses (descs: max_count x 3
        int64 words; count: one uint32; workspace: workspace_bytes(max_count)
        bytes, 16-byte aligned)."""
        _check(_lib.p2pt_copy_batch_device_async(self._h, descs, count, max_count, workspace,
                                                 stream or None))

    def window_register(self, device, base, nbytes):
        _check(_lib.p2pt_window_register(self._h, device, base, nbytes))

    def window_unregister(self, device, base):
        _check(_lib.p2pt_window_unregister(self._h, device, base))

    def properties(self):
        p = _Props()
        p.size = ctypes.sizeof(_Props)
        _check(_lib.p2pt_get_properties(self._h, ctypes.byref(p)))
        return {name: getattr(p, name) for name, _ in _Props._fields_ if name != "size"}
