# SPDX-License-Identifier: Apache-2.0
"""p2pt on PyTorch tensors: copies, batches, row copies and KV-cache block
swaps on the current CUDA stream (or the one given), capturable in
torch.cuda.graph and kept in torch.compile's graph (the operations are
registered with torch.library).

    import p2pt.torch as pt
    pt.copy_(dst, src)                          # one copy: dst and src contiguous, same bytes
    pt.copy_batch_([d0, d1], [s0, s1])          # one stream-ordered batch
    st = pt.copy_rows_(dst, dst_rows, src, src_rows)
        # dst[dst_rows[i]] = src[src_rows[i]], the descriptors built on the GPU
        # (no host sync; a captured graph follows new indices). Rows outside the
        # tensor are skipped, never written, and counted in the status record.
    pt.swap_blocks(src_layers, dst_layers, block_mapping)
        # vLLM's swap_blocks for every layer at once, as ONE p2pt batch: one
        # p2pt_block_layout_swap call on the layers' layout (made at their
        # first swap) with a CPU or a GPU mapping (a GPU one in a captured
        # graph: a CPU mapping would be read once, at capture).

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

# The modules, each importing only those before it: _handles, _host, _ops
# (which registers the copy operations), _swap_layout, _swap_blocks (which
# registers p2pt::swap_blocks); this file has the public calls. Private names
# are re-exported for the tests and bench/experiments (rebind one on the
# module that reads it).
import functools

from .. import _handle  # noqa: F401  (tests patch p2pt.torch._handle.Handle)
from .._lib import Error
from ._handles import _cur, _eager, _eager_on_a_stream, _get, _hid, _stream  # noqa: F401
from ._handles import handle, prepare, register_window
from ._host import _held, _warned  # noqa: F401
from ._ops import batch_status, check_status, row_descriptors
from ._swap_layout import _layout, _layouts  # noqa: F401
from . import _swap_blocks
from ._swap_blocks import _outside_graph

__all__ = ["handle", "prepare", "copy_", "copy_batch_", "copy_rows_", "copy_batch_device_",
           "swap_blocks", "row_descriptors", "register_window", "batch_status", "check_status",
           "Error"]


# ------------------------------------------------------------ the public calls

@_eager_on_a_stream
def copy_(dst, src, *, stream=None, handle=None):
    """Copy src's bytes into dst (both contiguous, the same size; each a
    CUDA tensor on any GPU the stream's device can reach, or a pinned CPU
    tensor) on `stream` (default: the current one)."""
    hid = _hid(handle)
    with _stream(stream):
        torch.ops.p2pt.copy_(dst, src, hid)
    return dst


@_eager_on_a_stream
def copy_batch_(dsts, srcs, *, stream=None, handle=None):
    """Copy srcs[i] into dsts[i] for every i, as one stream-ordered batch.
    The pieces run at once: no piece's destination may overlap another
    piece's source or destination (p2pt_copy_batch_async's contract)."""
    hid = _hid(handle)
    with _stream(stream):
        torch.ops.p2pt.copy_batch_(list(dsts), list(srcs), hid)
    return dsts


@_eager_on_a_stream
def copy_rows_(dst, dst_index, src, src_index=None, *, count=None, stream=None, handle=None):
    """dst[dst_index[i]] = src[src_index[i]] (an index None: 0..n-1) for i
    below `count` (an int32 GPU tensor read when the batch runs; default:
    every row), as one device batch with no host sync. Returns the batch's
    (8,) int32 status record (see batch_status, check_status), on the device
    of the first CUDA tensor among dst, src and the indices. The rows run at
    once: where dst and src are one tensor, a row that one piece writes and
    another reads gives the reader undefined bytes."""
    hid = _hid(handle)
    with _stream(stream):
        return torch.ops.p2pt.copy_rows_(dst, dst_index, src, src_index, count, hid)


@functools.partial(
    _eager, why="p2pt.torch.copy_batch_device_ writes memory that its records name by "
                "address, which a compiled graph cannot see: it runs eagerly (call it between "
                "compiled functions, or use copy_rows_, which names its tensors)")
def copy_batch_device_(descs, count, *, max_count=None, stream=None, handle=None):
    """A device batch of the (n, 3) int64 records in `descs` (row_descriptors
    builds them), the first `count` (int32 GPU tensor) of them. The memory
    they touch must lie in windows (register_window); they run at once, so
    no record's destination may overlap another's source or destination.
    Under torch.compile it runs as it does eagerly, a graph break: the
    memory its records name by address is invisible to the compiler, which
    may move a read of it across the batch (copy_rows_ names its tensors
    and stays in the graph)."""
    hid = _hid(handle)
    with _stream(stream):
        return torch.ops.p2pt.copy_batch_device_(
            descs, count, descs.shape[0] if max_count is None else max_count, hid)


@_eager_on_a_stream
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

    The layers are checked once, at their first swap, into a layout of the
    C library, found again by the ids of the same tensors; each swap is one
    p2pt_block_layout_swap call on it. A CPU mapping is checked there
    (every id in range, no destination written twice or also read: a
    ValueError naming the cell or the rows) and becomes one host batch. A
    GPU mapping becomes one device batch whose descriptors are built on the
    GPU, with no host sync, so a captured graph follows a new mapping at
    every replay; an id out of range is skipped, never written, and counted
    in the returned status record (check=True, or check_status, raises on
    it); as in vLLM, a block listed twice gets either source. Returns the
    (8,) int32 status record, on the mapping's device.

    Pinned storages stay alive until the stream has passed the swap (torch's
    pinned cache does not see p2pt's use), held by the handle and an event.

    sm_budget: P2P_TRANSPORT_SM_BUDGET for this swap (0: no kernel at all,
    N: at most N CTAs), through a handle per value, created at first use.
    Between GPU memory and pinned host memory the C library takes the host
    link's CTAs (its policy's `link` lines), for either kind of mapping.
    """
    hid = _hid(handle, sm_budget)
    srcs, dsts = _layers(src, "src"), _layers(dst, "dst")
    with _stream(stream):
        if not _compiling() and _plain(srcs, dsts, block_mapping):
            # the op's body without the dispatcher's boxing of 2 x layers tensors
            st = _swap_blocks._swap(srcs, dsts, block_mapping, hid)  # (~27 us on an H100 host)
        elif _compiling() and any([d._base is not None for d in dsts]):  # ._base: dynamo traces it
            st = _outside_graph(srcs, dsts, block_mapping, hid)
        else:
            st = torch.ops.p2pt.swap_blocks.default(srcs, dsts, block_mapping, hid)
        if check:
            if _compiling():
                raise RuntimeError("p2pt.torch.swap_blocks: check=True reads the status on the "
                                   "host, which a compiled graph cannot; call check_status "
                                   "outside it")
            _check_swap(st, block_mapping.shape[0] if block_mapping.dim() else 0)
    return st


_Tensor, _compiling = torch.Tensor, torch.compiler.is_compiling
_PLAIN = {_Tensor}  # plain tensors: one set test, half the time of isinstance on each
_has_torch_function = torch.overrides.has_torch_function


def _plain(srcs, dsts, mapping):
    """Whether the dispatcher would only call the op's body: plain tensors, no
    __torch_function__ mode, no dst that autograd follows (else torch.ops)."""
    return type(mapping) is _Tensor and (mapping.is_cpu or mapping.is_cuda) and \
        set(map(type, srcs)) <= _PLAIN and set(map(type, dsts)) <= _PLAIN and \
        not _has_torch_function((mapping,)) and \
        not (torch.is_grad_enabled() and any([t.requires_grad for t in dsts]))


def _layers(x, role):
    """x as a list of tensors (a list given is used as it is: nothing writes it)."""
    if isinstance(x, _Tensor):
        return [x]
    if isinstance(x, (list, tuple)) and (set(map(type, x)) <= _PLAIN or
                                         all(isinstance(t, _Tensor) for t in x)):
        return x if type(x) is list else list(x)
    raise TypeError(f"p2pt.torch.swap_blocks: {role} must be a tensor or a list of tensors "
                    f"(one per layer), not {type(x).__name__}")


def _check_swap(st, n):
    s = batch_status(st)
    if s.skipped:
        p = s.first_bad
        where = f"block_mapping row {p % n} of layer {p // n}" if n else f"piece {p}"
        check_status(st, f"p2pt.torch.swap_blocks (first skipped: {where})")
