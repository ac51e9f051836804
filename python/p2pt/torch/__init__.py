# SPDX-License-Identifier: Apache-2.0
"""p2pt on PyTorch tensors: copies, batches, row copies and KV-cache block
swaps on the current CUDA stream (or the one given), capturable in
torch.cuda.graph and kept in torch.compile's graph (the operations are
registered with torch.library).

    import p2pt.torch as pt
    pt.copy_(dst, src)                          # one copy: dst and src contiguous, same bytes
    pt.copy_batch_([d0, d1], [s0, s1])          # one stream-ordered batch
    st = pt.copy_rows_(dst, dst_rows, src, src_rows)
        # dst[dst_rows[i]] = src[src_rows[i]] for every i: the descriptors are
        # built on the GPU from the index tensors, so there is no host sync and
        # a captured graph follows new indices at every replay. Rows whose
        # index falls outside the tensor are skipped, never written; `st` is
        # the batch's status record (count, copied, skipped, first_bad, reasons).
    pt.swap_blocks(src_layers, dst_layers, block_mapping)
        # vLLM's swap_blocks for every layer at once: block mapping[i, 0] of
        # each src layer to block mapping[i, 1] of the same dst layer, as ONE
        # p2pt batch (a host batch for a CPU mapping, a device batch built on
        # the GPU for a GPU mapping).

Either side of every operation may be a CUDA tensor or a pinned CPU tensor
(pin_memory()). A pageable CPU tensor still works, through a plain torch
copy (correct, slower, synchronous), with a warning once per operation and
role.

Device batches (row copies, swaps with a GPU mapping) run as a kernel: the
default handle is "auto" unless P2P_TRANSPORT says otherwise. Windows for
the storages they touch are registered on first use and released when the
storage is freed or the handle closes (register_window pins one
explicitly); at most properties()["max_windows"] storages per device. Run
an operation once per device (or call prepare) before capturing a graph:
the first use compiles and loads the kernel and registers the windows.
"""
# First, before any module of the package imports torch.
try:
    import torch
except ImportError:
    # One line that says what to install, not the chain of the failed import.
    raise ImportError("p2pt.torch needs PyTorch: pip install torch (or, in a p2pt checkout, pip install \".[torch]\")") from None

# The modules, each importing only those above it in this list:
#   _handles     handles, the current device and stream, windows
#   _host        GPU, pinned or pageable memory; pinned storages held
#   _ops         row descriptors, status records, the device batch, the copy operations
#   _swap_layout a swap's layers: their checks, _Layout, the descriptors
#   _swap_blocks the swap: p2pt::swap_blocks, its host and GPU paths
# and this file: the public calls, and swap_blocks' eager path. Importing
# _ops and _swap_blocks registers the operations (once: Python imports a
# module once).
import operator

# The private names below are re-exported for the tests, bench/experiments
# and whoever reaches them as p2pt.torch._name. Each is the very object of
# the module that owns it (mutable state such as _held, _warned and
# _layouts is shared, not copied), and no module rebinds it. A name that a
# caller rebinds must be rebound on the module whose code reads it, as a
# name here is only a second reference: the tests patch _budgets on
# _handles (and _budgets is not re-exported, so patching it here fails
# loudly); LINK_CTAS is one dict, read by _swap_blocks: set its entries
# (p2pt.torch.LINK_CTAS["d2h"] = 4), never the name.
from .. import _handle  # noqa: F401  (tests patch p2pt.torch._handle.Handle)
from .._lib import Error
from ._handles import _cur, _device, _get, _hid, _ready, _stream  # noqa: F401
from ._handles import handle, prepare, register_window
from ._host import _held, _warned  # noqa: F401
from ._ops import batch_status, check_status, row_descriptors
from ._swap_layout import _data_ptr, _layout, _layouts  # noqa: F401
from ._swap_layout import _mapping_check  # noqa: F401
from ._swap_blocks import LINK_CTAS, _done, _done_eager, _swap, _swap_host  # noqa: F401
from ._swap_blocks import _swap_on_gpu

__all__ = ["handle", "prepare", "copy_", "copy_batch_", "copy_rows_", "copy_batch_device_",
           "swap_blocks", "row_descriptors", "register_window", "batch_status", "check_status",
           "Error"]


# ------------------------------------------------------------ the public calls

def copy_(dst, src, *, stream=None, handle=None):
    """Copy src's bytes into dst (both contiguous, the same size; each a
    CUDA tensor on any GPU the stream's device can reach, or a pinned CPU
    tensor) on `stream` (default: the current one)."""
    hid = _hid(handle)
    with _stream(stream):
        torch.ops.p2pt.copy_(dst, src, hid)
    return dst


def copy_batch_(dsts, srcs, *, stream=None, handle=None):
    """Copy srcs[i] into dsts[i] for every i, as one stream-ordered batch."""
    hid = _hid(handle)
    with _stream(stream):
        torch.ops.p2pt.copy_batch_(list(dsts), list(srcs), hid)
    return dsts


def copy_rows_(dst, dst_index, src, src_index=None, *, count=None, stream=None, handle=None):
    """dst[dst_index[i]] = src[src_index[i]] (an index None: 0..n-1) for i
    below `count` (an int32 GPU tensor read when the batch runs; default:
    every row), as one device batch with no host sync. Returns the batch's
    (8,) int32 status record (see batch_status, check_status), on the device
    of the first CUDA tensor among dst, src and the indices."""
    hid = _hid(handle)
    with _stream(stream):
        return torch.ops.p2pt.copy_rows_(dst, dst_index, src, src_index, count, hid)


def copy_batch_device_(descs, count, *, max_count=None, stream=None, handle=None):
    """A device batch of the (n, 3) int64 records in `descs` (row_descriptors
    builds them), the first `count` (int32 GPU tensor) of them. The memory
    they touch must lie in windows (register_window)."""
    hid = _hid(handle)
    with _stream(stream):
        return torch.ops.p2pt.copy_batch_device_(
            descs, count, descs.shape[0] if max_count is None else max_count, hid)


def _layers(x, role):
    """x as a list of tensors (a list given is used as it is: nothing here
    or below writes it), and whether each is a plain torch.Tensor."""
    if isinstance(x, torch.Tensor):
        return [x], type(x) is _Tensor
    if isinstance(x, (list, tuple)):
        plain = set(map(type, x)) <= _PLAIN
        if plain or all(isinstance(t, torch.Tensor) for t in x):
            return (x if type(x) is list else list(x)), plain
    raise TypeError(f"p2pt.torch.swap_blocks: {role} must be a tensor or a list of tensors "
                    f"(one per layer), not {type(x).__name__}")


def swap_blocks(src, dst, block_mapping, *, stream=None, handle=None, sm_budget=None,
                check=False):
    """vLLM's swap_blocks for every layer at once: for each row (s, d) of
    `block_mapping` (int64 [n, 2]) and each layer l, block s of src[l] to
    block d of dst[l], as ONE p2pt batch on `stream` (default: the current
    one).

    src, dst: a tensor or lists of one tensor per layer (K and V as
    separate entries, or stacked), the same length; src[l] and dst[l] have
    the same dtype, block shape and strides. A block is index i along dim
    0, and its bytes are stride(0) * element_size() from its first element,
    so a padded block is copied whole. Either side on a GPU or in pinned
    host memory (a pageable one works through torch, with a warning).

    A CPU mapping is checked on the host (every id in range, no destination
    written twice or also read) and becomes one host batch. A GPU mapping
    becomes one device batch whose descriptors are built on the GPU, with
    no host sync, so a captured graph follows a new mapping at every
    replay; an id out of range is skipped, never written, and counted in
    the returned status record (check=True, or check_status, raises on it).
    A GPU mapping is not searched for repeated destinations (that would
    need a sync): as in vLLM, a block listed twice gets either source.
    Returns the (8,) int32 status record, on the mapping's device.

    Pinned storages are kept alive (a reference each) until the stream
    has passed the swap, since torch's cache of pinned memory does not see
    p2pt's use of them: one freed at once is not handed to a new tensor
    early. The references go once the stream has passed an event recorded
    at most 8 p2pt.torch calls later.

    sm_budget: P2P_TRANSPORT_SM_BUDGET for this swap (0: no kernel at all,
    N: at most N CTAs), through a handle per value, created at first use.
    Without one (and without handle= or a budget in the environment), a GPU
    mapping between GPU memory and pinned host memory takes
    LINK_CTAS["h2d"] (8) CTAs to the GPU and LINK_CTAS["d2h"] (3) to the
    host, which fill the host link; a CPU mapping takes what the C
    library's link lines give (8 and 3 on the H100 and the H200).
    """
    hid = _hid(handle, sm_budget)
    with _stream(stream):
        st = _again(src, dst, block_mapping, hid)
        if st is None:
            st = _swap_any(src, dst, block_mapping, hid)
        if check:
            if torch.compiler.is_compiling():
                raise RuntimeError("p2pt.torch.swap_blocks: check=True reads the status on the "
                                   "host, which a compiled graph cannot; call check_status "
                                   "outside it")
            _check_swap(st, block_mapping.shape[0] if block_mapping.dim() else 0)
    return st


def _again(src, dst, mapping, hid):
    """The common call, with the fewest host steps: layers swapped before
    (their _Layout is found by their ids, still serves them, and is
    .direct), a plain int64 [n, 2] mapping on the CPU or a GPU, an eager
    call that nothing must see (as _plain_eager). None where any of that
    does not hold: _swap_any then takes the call, with every check. A
    server swaps the same layers at every step, and each host step here
    costs several times more right after a synchronize
    (bench/results/offload.md, "PyTorch")."""
    if _compiling():
        return None  # dynamo traces the operation (and cannot trace id())
    key = (_ids(src), _ids(dst))
    if None in key:
        return None
    lay = _layouts.get(key)
    if lay is None or not lay.direct or type(mapping) is not _Tensor or \
            mapping.dtype != _int64 or mapping.dim() != 2 or mapping.shape[1] != 2:
        return None
    on_cpu = mapping.is_cpu
    if not on_cpu and not mapping.is_cuda:
        return None  # meta and the like: the general path names them
    srcs = src if type(src) is list else [src]
    dsts = dst if type(dst) is list else [dst]
    if not lay.serves(srcs, dsts) or not _plain_eager(dsts, mapping):
        return None
    if on_cpu:
        return _swap_host(lay, srcs, dsts, mapping, hid, lambda: _mutated(dsts), _done_eager)
    return _swap_on_gpu(lay, srcs, dsts, mapping, hid, lambda: _mutated(dsts))


def _ids(x):
    """The ids _layout keys x's layers by: a list's tensors, or a lone
    plain tensor's; None for anything else (a tuple, a subclass), which
    _swap_any takes."""
    if type(x) is list:
        return tuple(map(id, x))
    return (id(x),) if type(x) is _Tensor else None


def _swap_any(src, dst, block_mapping, hid):
    """swap_blocks for any arguments: the body directly where nothing
    must see the operation (_plain_eager), else through the dispatcher."""
    (srcs, plain_src), (dsts, plain_dst) = _layers(src, "src"), _layers(dst, "dst")
    if plain_src and plain_dst and _plain_eager(dsts, block_mapping):
        # The versions go up just before the launch where there is one
        # (host steps after it are slow), else after the swap's body.
        bumped = []
        st = _swap(srcs, dsts, block_mapping, hid, lambda: bumped.append(_mutated(dsts)))
        if not bumped:
            _mutated(dsts)
        return st
    return torch.ops.p2pt.swap_blocks(srcs, dsts, block_mapping, hid)


_Tensor = torch.Tensor
_PLAIN = {_Tensor}
_requires_grad = operator.attrgetter("requires_grad")
_grad_on = torch.is_grad_enabled
_compiling = torch.compiler.is_compiling
# torch.autograd.graph.increment_version without its wrapper, where the
# build has the C entry (it takes a list, as the wrapper passes one).
_bump = getattr(torch._C, "_increment_version", None) or torch.autograd.graph.increment_version
_int64 = torch.int64
_is_fn_mode = getattr(torch._C, "_is_torch_function_mode_enabled", None)
_dispatch_depth = getattr(torch._C, "_len_torch_dispatch_stack", None)
_tracing = getattr(torch._C, "_get_tracing_state", None)
_functorch = getattr(getattr(torch._C, "_functorch", None), "maybe_current_level", None)
EAGER_DIRECT = None not in (_is_fn_mode, _dispatch_depth, _tracing, _functorch)


def _plain_eager(dsts, mapping):
    """Whether swap_blocks may run its body without the dispatcher, given
    layers that are plain tensors (_layers): eager, no mode, tracer or
    transform that must see the operation, no dst that autograd follows.
    The dispatcher's round trip of two lists of tensors costs more than the
    swap's own work on the host, and an eager call with none of these would
    reach the same body (_swap) through it; everything else still goes
    through the operation."""
    if not EAGER_DIRECT or torch.compiler.is_compiling() or _is_fn_mode() or \
            _dispatch_depth() or _tracing() is not None or _functorch() is not None:
        return False
    # Without grad mode the operation would not look at requires_grad
    # either; with it, one pass in C, not a Python loop per layer.
    return type(mapping) is _Tensor and not (_grad_on() and any(map(_requires_grad, dsts)))


def _mutated(dsts):
    """Bump the version counter of every dst, as the operation's in-place
    kernel does, so that autograd sees the write (inference tensors have
    no counter)."""
    try:
        _bump(dsts)
    except (RuntimeError, TypeError, AttributeError):
        for t in dsts:
            if not t.is_inference():
                torch.autograd.graph.increment_version(t)


def _check_swap(st, n):
    s = batch_status(st)
    if s.skipped:
        p = s.first_bad
        where = f"block_mapping row {p % n} of layer {p // n}" if n else f"piece {p}"
        check_status(st, f"p2pt.torch.swap_blocks (first skipped: {where})")
