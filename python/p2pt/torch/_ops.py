# SPDX-License-Identifier: Apache-2.0
"""Row descriptors built on the GPU (row_descriptors), a batch's status
record (batch_status, check_status, _status, _no_pieces), the device batch
(_device_batch), and the copy operations registered with their fake
kernels: p2pt::copy_, p2pt::copy_batch_, p2pt::copy_rows_ and
p2pt::copy_batch_device_."""
import math
from typing import List, Optional

import torch

from .. import _handle
from .._lib import Error, Status
from ._handles import _cur, _device, _get, _ready, _windows
from ._host import _flat_bytes, _hold_pinned, _host_only, _pageable

_UINT32_MAX = 0xFFFFFFFF


def _row_bytes(t, what):
    if not t.is_contiguous() or t.dim() < 1:
        raise ValueError(f"p2pt.torch: {what} must be a contiguous tensor of rows (got a "
                         f"{'non-contiguous' if t.dim() else '0-d'} tensor of shape "
                         f"{tuple(t.shape)})")
    return math.prod(t.shape[1:]) * t.element_size()


def _index(t, what):
    """`t` (an index tensor or None) if it holds integers: a bool mask would
    be read as rows 0 and 1, floats truncated."""
    if t is not None and (not isinstance(t, torch.Tensor) or t.is_floating_point() or
                          t.is_complex() or t.dtype == torch.bool):
        raise ValueError(f"p2pt.torch: {what} must be a tensor of integer row numbers, not "
                         f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__} "
                         f"(a mask gives its rows with mask.nonzero())")
    return t


def _rows_of(dst, dst_index, src, src_index):
    """The bytes of a row (the same on both sides) and the index given."""
    _index(dst_index, "dst_index")
    _index(src_index, "src_index")
    rb = _row_bytes(dst, "dst")
    if _row_bytes(src, "src") != rb:
        raise ValueError(f"p2pt.torch: dst rows are {rb} bytes, src rows "
                         f"{_row_bytes(src, 'src')}: they must match")
    if dst_index is None and src_index is None:
        raise ValueError("p2pt.torch: give dst_index, src_index or both")
    return rb, dst_index if dst_index is not None else src_index


def row_descriptors(dst, dst_index, src, src_index=None):
    """The (n, 3) int64 tensor of p2pt_copy_desc records that copies row
    src_index[i] of src to row dst_index[i] of dst (None: 0..n-1), built on
    the index's device with no host sync. An index past the tensor's rows,
    or below 0, gives a descriptor of NULL addresses, which a device batch
    skips."""
    rb, ref = _rows_of(dst, dst_index, src, src_index)
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
    if di.device != si.device:
        raise ValueError(f"p2pt.torch: dst_index is on {di.device}, src_index on {si.device}: "
                         f"they must be on one device")
    # One kernel a line: columns written in place (out=), base addresses as 0-d
    # CPU tensors (kernel arguments: no host-to-device copy, which capture refuses).
    descs = torch.empty(n, 3, dtype=torch.int64, device=ref.device)
    torch.add(torch.tensor(dst.data_ptr()), di, alpha=rb, out=descs[:, 0])
    torch.add(torch.tensor(src.data_ptr()), si, alpha=rb, out=descs[:, 1])
    descs[:, 2] = rb
    # An index outside the tensor (negative too: no wrapping) gets NULL addresses,
    # which no window holds; i // rows is 0 exactly for 0 <= i < rows.
    if dst.shape[0] == 0 or src.shape[0] == 0:
        descs[:, :2] = 0
    else:
        bad = torch.logical_or(torch.div(di, dst.shape[0], rounding_mode="floor"),
                               torch.div(si, src.shape[0], rounding_mode="floor"))
        descs[:, :2].masked_fill_(bad[:, None], 0)
    return descs


def batch_status(status):
    """p2pt.BatchStatus from the (8,) int32 status tensor a row copy, swap
    or device batch returns (synchronizes with the GPU)."""
    v = [int(x) & _UINT32_MAX for x in status.cpu().tolist()]
    return _handle.BatchStatus(*v[:5])


_REASONS = ((_handle.BATCH_SKIPPED_WINDOW, "an address outside every window (an index "
             "outside its tensor)"), (_handle.BATCH_SKIPPED_OVER_MAX, "an index past max_count"),
            (_handle.BATCH_SKIPPED_OVERLAP, "dst and src overlap"),
            (_handle.BATCH_SKIPPED_TOO_LARGE, "4 GiB or more"))


def check_status(status, what="p2pt.torch batch"):
    """Raise p2pt.Error (INVALID_ARGUMENT) when the batch of `status` (the
    (8,) int32 record a row copy, swap or device batch returns) skipped any
    piece; its BatchStatus otherwise. Synchronizes with the GPU."""
    s = batch_status(status)
    if s.skipped:
        why = "; ".join(text for bit, text in _REASONS if s.reasons & bit) or "unknown"
        raise Error(Status.INVALID_ARGUMENT,
                    f"{what}: {s.skipped} of {s.count} pieces were skipped, not written "
                    f"(the first is piece {s.first_bad}): {why}")
    return s


def _status(count, copied, skipped, first_bad, reasons, device):
    # Built on the CPU and moved: one small copy, in the slow paths only.
    return torch.tensor([count, copied, skipped, first_bad, reasons, 0, 0, 0],
                        dtype=torch.int64).to(torch.int32).to(device)


def _no_pieces(device):
    """The status record of a batch of no piece, made on `device` by fills
    (no host-to-device copy, so it may be captured)."""
    st = torch.zeros(8, dtype=torch.int32, device=device)
    st[3] = -1  # first_bad: none (UINT32_MAX)
    return st


def _device_batch(h, descs, count, max_count, device):
    """Enqueue a device batch on the current stream; the status record,
    copied out of the workspace on the GPU, as an (8,) int32 tensor."""
    # Zeroed: the kernel writes the five counters, not the reserved words,
    # and a record that differs from run to run in bytes nobody set would
    # make equal results compare unequal.
    ws = torch.zeros(h.workspace_bytes(max_count), dtype=torch.uint8,
                     device=torch.device("cuda", device))
    h.copy_batch_device(descs.data_ptr(), count.data_ptr(), max_count, ws.data_ptr(),
                        _cur(device))
    return ws[:32].view(torch.int32).clone()


# ------------------------------------------------- the registered operations

@torch.library.custom_op("p2pt::copy_", mutates_args=("dst",))
def _copy_op(dst: torch.Tensor, src: torch.Tensor, hid: int) -> None:
    if dst.nbytes != src.nbytes or not dst.is_contiguous() or not src.is_contiguous():
        raise ValueError(f"p2pt.torch.copy_: dst ({dst.nbytes} bytes) and src ({src.nbytes} "
                         f"bytes) must be contiguous and the same size")
    if _pageable("copy_", ((dst, "dst"), (src, "src"))):
        _host_only(dst, src)
        _flat_bytes(dst).copy_(_flat_bytes(src))
        return
    h, device = _get(hid), _device()
    stream = _cur(device)
    h.copy(dst.data_ptr(), src.data_ptr(), src.nbytes, stream)
    _hold_pinned(h, (dst, src), device, stream)


@_copy_op.register_fake
def _(dst, src, hid):
    return None


@torch.library.custom_op("p2pt::copy_batch_", mutates_args=("dsts",))
def _copy_batch_op(dsts: List[torch.Tensor], srcs: List[torch.Tensor], hid: int) -> None:
    if len(dsts) != len(srcs):
        raise ValueError(f"p2pt.torch.copy_batch_: {len(dsts)} destinations, {len(srcs)} sources")
    descs, slow, fast = [], [], []
    for i, (d, s) in enumerate(zip(dsts, srcs)):
        if d.nbytes != s.nbytes or not d.is_contiguous() or not s.is_contiguous():
            raise ValueError(f"p2pt.torch.copy_batch_: piece {i}: dst ({d.nbytes} bytes) and "
                             f"src ({s.nbytes} bytes) must be contiguous and the same size")
        if _pageable("copy_batch_", ((d, f"dsts[{i}]"), (s, f"srcs[{i}]"))):
            slow.append((d, s))
        else:
            descs.append((d.data_ptr(), s.data_ptr(), s.nbytes))
            fast += (d, s)
    if descs:
        h, device = _get(hid), _device()
        stream = _cur(device)
        h.copy_batch(descs, stream)
        _hold_pinned(h, fast, device, stream)
    for d, s in slow:
        _host_only(d, s)
        _flat_bytes(d).copy_(_flat_bytes(s))


@_copy_batch_op.register_fake
def _(dsts, srcs, hid):
    return None


def _rows_status_device(dst, src, dst_index, src_index):
    """Where a row copy's status record lives: the device of the first CUDA
    tensor among its arguments, else the CPU."""
    for t in (dst, src, dst_index, src_index):
        if t is not None and t.is_cuda:
            return t.device
    return torch.device("cpu")


def _rows_by_torch(dst, dst_index, src, src_index, count, device):
    """copy_rows_ with torch ops (a pageable side, or no CUDA tensor at all):
    the same rows skipped and the same status record as the device batch, at
    the cost of a host sync."""
    rb, ref = _rows_of(dst, dst_index, src, src_index)
    n = ref.numel()
    rows = torch.arange(n, dtype=torch.int64)
    di = rows if dst_index is None else dst_index.reshape(-1).to("cpu", torch.int64)
    si = rows if src_index is None else src_index.reshape(-1).to("cpu", torch.int64)
    if di.numel() != si.numel():
        raise ValueError(f"p2pt.torch: dst_index has {di.numel()} rows, src_index "
                         f"{si.numel()}: they must match")
    want = n if count is None else int(count.reshape(-1)[0].item()) & _UINT32_MAX
    m = min(want, n)
    ok = (di[:m] >= 0) & (di[:m] < dst.shape[0]) & (si[:m] >= 0) & (si[:m] < src.shape[0])
    _host_only(dst, src)
    dv = _flat_bytes(dst).view(dst.shape[0], rb)
    sv = _flat_bytes(src).view(src.shape[0], rb)
    picked = sv.index_select(0, si[:m][ok].to(src.device)).to(dst.device)
    dv.index_copy_(0, di[:m][ok].to(dst.device), picked)
    bad = (~ok).nonzero()
    skipped = int(bad.numel()) + max(want - n, 0)
    first = int(bad[0, 0]) if bad.numel() else (n if want > n else _UINT32_MAX)
    reasons = (_handle.BATCH_SKIPPED_WINDOW if bad.numel() else 0) | \
        (_handle.BATCH_SKIPPED_OVER_MAX if want > n else 0)
    return _status(want, m - int(bad.numel()), skipped, first, reasons, device)


@torch.library.custom_op("p2pt::copy_rows_", mutates_args=("dst",))
def _copy_rows_op(dst: torch.Tensor, dst_index: Optional[torch.Tensor], src: torch.Tensor,
                  src_index: Optional[torch.Tensor], count: Optional[torch.Tensor],
                  hid: int) -> torch.Tensor:
    where = _rows_status_device(dst, src, dst_index, src_index)
    if count is not None and (count.dtype not in (torch.int32, torch.uint32) or
                              count.numel() != 1):
        raise ValueError("p2pt.torch.copy_rows_: count must be one int32 (on the GPU for a "
                         "device batch)")
    if _pageable("copy_rows_", ((dst, "dst"), (src, "src"))) or where.type != "cuda":
        return _rows_by_torch(dst, dst_index, src, src_index, count, where)
    h, device = _get(hid), _device()
    _ready(h, device)
    gpu = torch.device("cuda", device)
    # The descriptors are read by the kernel, so they are built where it runs.
    dst_index = None if dst_index is None else dst_index.to(gpu)
    src_index = None if src_index is None else src_index.to(gpu)
    descs = row_descriptors(dst, dst_index, src, src_index)
    n = descs.shape[0]
    if n == 0:
        return _no_pieces(where)
    if count is None:
        count = torch.full((1,), n, dtype=torch.int32, device=gpu)
    elif not count.is_cuda:
        raise ValueError("p2pt.torch.copy_rows_: count must be one int32 on the GPU")
    _windows(h, device, (dst.untyped_storage(), src.untyped_storage()))
    st = _device_batch(h, descs, count, n, device)
    _hold_pinned(h, (dst, src), device, _cur(device))
    return st.to(where)


@_copy_rows_op.register_fake
def _(dst, dst_index, src, src_index, count, hid):
    return torch.empty(8, dtype=torch.int32,
                       device=_rows_status_device(dst, src, dst_index, src_index))


# "unknown": the batch writes memory that its descriptors name by address,
# which the compiler cannot see; declared so, torch.compile keeps the call
# (with no mutation declared it dropped a batch whose status went unread).
@torch.library.custom_op("p2pt::copy_batch_device_", mutates_args="unknown")
def _copy_batch_device_op(descs: torch.Tensor, count: torch.Tensor, max_count: int,
                          hid: int) -> torch.Tensor:
    h, device = _get(hid), _device()
    _ready(h, device)
    if descs.dtype != torch.int64 or descs.dim() != 2 or descs.shape[1] != 3 or \
            not descs.is_contiguous() or not descs.is_cuda:
        raise ValueError("p2pt.torch.copy_batch_device_: descs must be a contiguous (n, 3) "
                         "int64 CUDA tensor of (dst, src, bytes) records")
    if isinstance(max_count, bool) or not 1 <= max_count <= descs.shape[0]:
        raise ValueError(f"p2pt.torch.copy_batch_device_: max_count {max_count!r} must be from "
                         f"1 to the {descs.shape[0]} records of descs (the kernel reads that "
                         f"many)")
    if count.dtype not in (torch.int32, torch.uint32) or count.numel() != 1 or \
            count.device != descs.device:
        raise ValueError(f"p2pt.torch.copy_batch_device_: count must be one int32 on "
                         f"{descs.device}, not {count.numel()} {count.dtype} on {count.device}")
    return _device_batch(h, descs, count, max_count, device)


@_copy_batch_device_op.register_fake
def _(descs, count, max_count, hid):
    return torch.empty(8, dtype=torch.int32, device=descs.device)
