# SPDX-License-Identifier: Apache-2.0
"""p2pt on PyTorch tensors: copies, batches and row copies on the current
CUDA stream (or the one given), capturable in torch.cuda.graph and kept in
torch.compile's graph (the operations are registered with torch.library).

    import p2pt.torch as pt
    pt.copy_(dst, src)                          # one copy: dst and src contiguous, same bytes
    pt.copy_batch_([d0, d1], [s0, s1])          # one stream-ordered batch
    st = pt.copy_rows_(dst, dst_rows, src, src_rows)
        # dst[dst_rows[i]] = src[src_rows[i]] for every i: the descriptors are
        # built on the GPU from the index tensors, so there is no host sync and
        # a captured graph follows new indices at every replay. Rows whose
        # index falls outside the tensor are skipped, never written; `st` is
        # the batch's status record (count, copied, skipped, first_bad, reasons).

Row copies run as one device batch, which only a kernel transport reads:
the default handle is "auto" unless P2P_TRANSPORT says otherwise. Windows
for the tensors a row copy touches are registered on first use and released
when the tensor is collected or the handle closes (register_window pins one
explicitly). Run an operation once per device (or call prepare) before
capturing a graph: the first use compiles and loads the kernel.
"""
import math
import os
import threading
import warnings
from contextlib import nullcontext
from typing import List, Optional

try:
    import torch
except ImportError:
    # One line that says what to install, not the chain of the failed import.
    raise ImportError("p2pt.torch needs PyTorch: pip install p2pt[torch]") from None

from . import _handle
from ._lib import Error, Status

__all__ = ["handle", "prepare", "copy_", "copy_batch_", "copy_rows_", "copy_batch_device_",
           "row_descriptors", "register_window", "batch_status", "Error"]

_lock = threading.Lock()
_default = None


def handle(transport=None, options=None):
    """The default handle of p2pt.torch, created at the first call (its
    arguments then decide; later ones must match or be None)."""
    global _default
    with _lock:
        if _default is None:
            if transport is None and options is None and "P2P_TRANSPORT" not in os.environ:
                options = "P2P_TRANSPORT=auto"
            _default = _handle.Handle(transport=transport, options=options)
        elif transport is not None or options is not None:
            p = _default.properties()
            if transport is not None and p["transport"] != transport.lower():
                raise ValueError(f"p2pt.torch's default handle already exists with transport "
                                 f"{p['transport']!r}; pass handle=p2pt.Handle(...) instead")
        return _default


def _hid(h):
    """The operations' int argument for handle `h` (None: the default): its
    pointer. Plain attribute reads, so that torch.compile traces through."""
    if h is None:
        h = _default
        if h is None:
            if torch.compiler.is_compiling():
                raise RuntimeError("p2pt.torch: create the default handle before compiling "
                                   "(call p2pt.torch.handle() once), or pass handle=")
            h = handle()
    return h.pointer


def _get(hid):
    h = _handle.lookup(hid)
    if h is None:
        raise ValueError("p2pt.torch: the handle of this operation is closed")
    return h


def _device():
    return torch.cuda.current_device()


def _ready(h, device):
    if device in h._prepared:
        return
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"p2pt.torch: device {device} is not prepared, and a graph is being "
                           f"captured: call p2pt.torch.prepare({device}) or run the operation "
                           f"once before capturing (the first use compiles the kernel)")
    h.prepare(device)


def _stream(stream):
    return torch.cuda.stream(stream) if stream is not None else nullcontext()


def _cur():
    return torch.cuda.current_stream().cuda_stream


def _storage(t):
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def prepare(device=None, handle=None):
    """Compile and load p2pt's kernels for `device` (default: the current
    one) before a graph is captured."""
    h = _get(_hid(handle))
    dev = _device() if device is None else torch.device("cuda", device).index
    h.prepare(dev)


def register_window(tensor, *, handle=None, device=None):
    """Register the storage of `tensor` for device batches on `device`
    (default: the current device); p2pt.Window, released by release(), when
    `tensor` is collected, or when the handle closes."""
    h = _get(_hid(handle))
    base, nbytes = _storage(tensor)
    return h.window(_device() if device is None else device, base, nbytes, tensor)


def _windows(h, device, *tensors):
    for t in tensors:
        base, nbytes = _storage(t)
        h.window(device, base, nbytes, t)


def _row_bytes(t, what):
    if not t.is_contiguous() or t.dim() < 1:
        raise ValueError(f"p2pt.torch: {what} must be a contiguous tensor of rows (got a "
                         f"{'non-contiguous' if t.dim() else '0-d'} tensor of shape "
                         f"{tuple(t.shape)})")
    return math.prod(t.shape[1:]) * t.element_size()


def row_descriptors(dst, dst_index, src, src_index=None):
    """The (n, 3) int64 tensor of p2pt_copy_desc records that copies row
    src_index[i] of src to row dst_index[i] of dst (None: 0..n-1), built on
    the GPU with no host sync. An index past the tensor's rows, or below 0,
    gives a descriptor of NULL addresses, which a device batch skips."""
    rb = _row_bytes(dst, "dst")
    if _row_bytes(src, "src") != rb:
        raise ValueError(f"p2pt.torch: dst rows are {rb} bytes, src rows "
                         f"{_row_bytes(src, 'src')}: they must match")
    if dst_index is None and src_index is None:
        raise ValueError("p2pt.torch: give dst_index, src_index or both")
    ref = dst_index if dst_index is not None else src_index
    n = ref.numel()
    if dst_index is None or src_index is None:
        rows = torch.arange(n, device=ref.device, dtype=torch.int64)
    # int64 before any arithmetic: a 0-d base address does not widen an
    # int32 index in type promotion, so the sum would be int32, truncated.
    di = rows if dst_index is None else dst_index.reshape(-1).to(torch.int64)
    si = rows if src_index is None else src_index.reshape(-1).to(torch.int64)
    if di.numel() != si.numel():
        raise ValueError(f"p2pt.torch: dst_index has {di.numel()} rows, src_index "
                         f"{si.numel()}: they must match")
    # Each line below is one kernel on the GPU, and under a CUDA graph the
    # kernels of a build this small cost more than their arithmetic, so the
    # columns are written in place (out=) and the base addresses enter as
    # 0-d CPU tensors (kernel arguments: no host-to-device copy, which a
    # graph being captured would refuse).
    descs = torch.empty(n, 3, dtype=torch.int64, device=ref.device)
    torch.add(torch.tensor(dst.data_ptr()), di, alpha=rb, out=descs[:, 0])
    torch.add(torch.tensor(src.data_ptr()), si, alpha=rb, out=descs[:, 1])
    descs[:, 2] = rb
    # An index outside the tensor (negative ones included: no wrapping) gets
    # NULL addresses, which no window holds, so the batch skips it even
    # where a window covers the memory around a view. i // rows is 0
    # exactly for 0 <= i < rows (floor division): one kernel per side
    # instead of two comparisons and an and.
    if dst.shape[0] == 0 or src.shape[0] == 0:
        descs[:, :2] = 0
    else:
        bad = torch.logical_or(torch.div(di, dst.shape[0], rounding_mode="floor"),
                               torch.div(si, src.shape[0], rounding_mode="floor"))
        descs[:, :2].masked_fill_(bad[:, None], 0)
    return descs


def batch_status(status):
    """p2pt.BatchStatus from the (8,) int32 status tensor a row copy or
    device batch returns (synchronizes with the GPU)."""
    v = [int(x) & 0xFFFFFFFF for x in status.cpu().tolist()]
    return _handle.BatchStatus(*v[:5])


def _device_batch(h, descs, count, max_count, device):
    """Enqueue a device batch on the current stream; the status record,
    copied out of the workspace on the GPU, as an (8,) int32 tensor."""
    ws = torch.empty(h.workspace_bytes(max_count), dtype=torch.uint8,
                     device=torch.device("cuda", device))
    h.copy_batch_device(descs.data_ptr(), count.data_ptr(), max_count, ws.data_ptr(), _cur())
    return ws[:32].view(torch.int32).clone()


# ------------------------------------------------- the registered operations

@torch.library.custom_op("p2pt::copy_", mutates_args=("dst",))
def _copy_op(dst: torch.Tensor, src: torch.Tensor, hid: int) -> None:
    h = _get(hid)
    if dst.nbytes != src.nbytes or not dst.is_contiguous() or not src.is_contiguous():
        raise ValueError(f"p2pt.torch.copy_: dst ({dst.nbytes} bytes) and src ({src.nbytes} "
                         f"bytes) must be contiguous and the same size")
    h.copy(dst.data_ptr(), src.data_ptr(), src.nbytes, _cur())


@_copy_op.register_fake
def _(dst, src, hid):
    return None


@torch.library.custom_op("p2pt::copy_batch_", mutates_args=("dsts",))
def _copy_batch_op(dsts: List[torch.Tensor], srcs: List[torch.Tensor], hid: int) -> None:
    h = _get(hid)
    if len(dsts) != len(srcs):
        raise ValueError(f"p2pt.torch.copy_batch_: {len(dsts)} destinations, {len(srcs)} sources")
    descs = []
    for i, (d, s) in enumerate(zip(dsts, srcs)):
        if d.nbytes != s.nbytes or not d.is_contiguous() or not s.is_contiguous():
            raise ValueError(f"p2pt.torch.copy_batch_: piece {i}: dst ({d.nbytes} bytes) and "
                             f"src ({s.nbytes} bytes) must be contiguous and the same size")
        descs.append((d.data_ptr(), s.data_ptr(), s.nbytes))
    h.copy_batch(descs, _cur())


@_copy_batch_op.register_fake
def _(dsts, srcs, hid):
    return None


@torch.library.custom_op("p2pt::copy_rows_", mutates_args=("dst",))
def _copy_rows_op(dst: torch.Tensor, dst_index: Optional[torch.Tensor], src: torch.Tensor,
                  src_index: Optional[torch.Tensor], count: Optional[torch.Tensor],
                  hid: int) -> torch.Tensor:
    h = _get(hid)
    if not dst.is_cuda or not src.is_cuda:
        raise ValueError(f"p2pt.torch.copy_rows_: dst ({dst.device}) and src ({src.device}) "
                         f"must be CUDA tensors")
    device = _device()
    _ready(h, device)
    descs = row_descriptors(dst, dst_index, src, src_index)
    n = descs.shape[0]
    if n == 0:
        return torch.zeros(8, dtype=torch.int32, device=torch.device("cuda", device))
    if count is None:
        count = torch.full((1,), n, dtype=torch.int32, device=descs.device)
    elif count.dtype not in (torch.int32, torch.uint32) or count.numel() != 1 or not count.is_cuda:
        raise ValueError("p2pt.torch.copy_rows_: count must be one int32 on the GPU")
    _windows(h, device, dst, src)
    return _device_batch(h, descs, count, n, device)


@_copy_rows_op.register_fake
def _(dst, dst_index, src, src_index, count, hid):
    return torch.empty(8, dtype=torch.int32, device=dst.device)


@torch.library.custom_op("p2pt::copy_batch_device_", mutates_args=())
def _copy_batch_device_op(descs: torch.Tensor, count: torch.Tensor, max_count: int,
                          hid: int) -> torch.Tensor:
    h = _get(hid)
    device = _device()
    _ready(h, device)
    if descs.dtype != torch.int64 or descs.dim() != 2 or descs.shape[1] != 3 or \
            not descs.is_contiguous() or not descs.is_cuda:
        raise ValueError("p2pt.torch.copy_batch_device_: descs must be a contiguous (n, 3) "
                         "int64 CUDA tensor of (dst, src, bytes) records")
    return _device_batch(h, descs, count, max_count, device)


@_copy_batch_device_op.register_fake
def _(descs, count, max_count, hid):
    return torch.empty(8, dtype=torch.int32, device=descs.device)


# ------------------------------------------------------------ the public calls

def copy_(dst, src, *, stream=None, handle=None):
    """Copy src's bytes into dst (both contiguous, the same size, any GPUs
    the stream's device can reach) on `stream` (default: the current one)."""
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
    (8,) int32 status record on the GPU (see batch_status)."""
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
