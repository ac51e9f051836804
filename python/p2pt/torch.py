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
import collections
import ctypes
import itertools
import math
import operator
import os
import threading
import weakref
import warnings
from contextlib import nullcontext
from typing import List, Optional

try:
    import torch
except ImportError:
    # One line that says what to install, not the chain of the failed import.
    raise ImportError("p2pt.torch needs PyTorch: pip install p2pt[torch]") from None

from . import _handle
from . import _structs
from ._lib import Error, Status

__all__ = ["handle", "prepare", "copy_", "copy_batch_", "copy_rows_", "copy_batch_device_",
           "swap_blocks", "row_descriptors", "register_window", "batch_status", "check_status",
           "Error"]

_lock = threading.Lock()
_default = None
_budgets = {}  # sm_budget -> Handle
_UINT32_MAX = 0xFFFFFFFF


def _policy_options(options):
    if options is None and "P2P_TRANSPORT" not in os.environ:
        return {"P2P_TRANSPORT": "auto"}
    return options


def handle(transport=None, options=None, *, sm_budget=None):
    """The default handle of p2pt.torch, created at the first call (its
    arguments then decide; later ones must match or be None). With
    `sm_budget`, the handle of that budget (P2P_TRANSPORT_SM_BUDGET: 0 runs
    no kernel, N at most N CTAs), one per value, created at its first use."""
    global _default
    if sm_budget is not None:
        if transport is not None or options is not None:
            raise ValueError("p2pt.torch.handle: sm_budget= takes no transport or options; "
                             "pass handle=p2pt.Handle(...) for other settings")
        return _budget_handle(_budget_value(sm_budget))
    with _lock:
        if _default is None:
            if transport is None:
                options = _policy_options(options)
            _default = _handle.Handle(transport=transport, options=options)
        elif transport is not None or options is not None:
            p = _default.properties()
            if transport is not None and p["transport"] != transport.lower():
                raise ValueError(f"p2pt.torch's default handle already exists with transport "
                                 f"{p['transport']!r}; pass handle=p2pt.Handle(...) instead")
        return _default


def _budget_value(sm_budget):
    if isinstance(sm_budget, bool) or not isinstance(sm_budget, int) or sm_budget < 0:
        raise ValueError(f"p2pt.torch: sm_budget={sm_budget!r}: expected None or an int >= 0 "
                         f"(0: no kernel at all, N: at most N CTAs)")
    return sm_budget


def _budget_handle(budget):
    with _lock:
        h = _budgets.get(budget)
        if h is None:
            options = dict(_policy_options(None) or {})
            options["P2P_TRANSPORT_SM_BUDGET"] = budget
            h = _budgets[budget] = _handle.Handle(options=options)
        return h


def _hid(h, sm_budget=None):
    """The operations' int argument for handle `h`: its pointer; 0 for the
    default handle and -1 - N for the handle of sm_budget N, both created
    when an operation first runs (so tracing creates nothing). Plain reads,
    so that torch.compile traces through."""
    if h is not None:
        if sm_budget is not None:
            raise ValueError("p2pt.torch: give handle= or sm_budget=, not both")
        if not h.pointer:
            raise ValueError("p2pt.torch: the handle passed is closed")
        return h.pointer
    if sm_budget is None:
        return 0
    return -1 - _budget_value(sm_budget)


def _get(hid):
    if hid == 0:
        return handle()
    if hid < 0:
        return _budget_handle(-1 - hid)
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


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _cur(device=None):
    """The current stream's handle (of `device`, the current device, when
    the caller has it already)."""
    if _raw_stream is not None:  # the same handle without a Stream object
        return _raw_stream(torch.cuda.current_device() if device is None else device)
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
    """Register the storage of `tensor` (GPU or pinned host memory) for
    device batches on `device` (default: the current device); p2pt.Window,
    released by release(), when the storage is freed, or when the handle
    closes."""
    h = _get(_hid(handle))
    base, nbytes = _storage(tensor)
    return h.window(_device() if device is None else device, base, nbytes,
                    tensor.untyped_storage())


def _windows(h, device, tensors):
    # One window per storage, owned by the storage object (which lives as
    # long as the memory, whatever views of it come and go), so that views
    # made afresh at every call find the registration of the first.
    for t in tensors:
        base, nbytes = _storage(t)
        h.window(device, base, nbytes, t.untyped_storage())


# ------------------------------------------------ where a tensor's bytes are

_warned = set()


def _side(t, op, role):
    """"cuda", "pinned" or "pageable": how `role` of `op` reaches p2pt."""
    if t.is_cuda:
        return "cuda"
    if t.device.type != "cpu":
        raise ValueError(f"p2pt.torch.{op}: {role} is on {t.device}; expected a CUDA tensor or "
                         f"a CPU tensor (pinned with pin_memory() for p2pt)")
    return "pinned" if t.is_pinned() else "pageable"


def _pageable(op, sides):
    """Whether any of the (tensor, role) `sides` of `op` is pageable host
    memory, which no stream can reach; warns once per op and role ("src[3]"
    counts as "src": one warning, not one per layer)."""
    found = False
    for t, role in sides:
        if _side(t, op, role) == "pageable":
            found = True
            key = (op, role.split("[")[0])
            if key not in _warned:
                _warned.add(key)
                warnings.warn(f"p2pt.torch.{op}: {role} is a pageable CPU tensor, which a CUDA "
                              f"stream cannot reach: it is copied with torch instead (correct, "
                              f"slower, synchronous); allocate it with pin_memory=True or call "
                              f"{role}.pin_memory() to let p2pt move it", stacklevel=2)
    return found


class _Held:
    """Pinned storages that work on a stream may still read or write, each
    kept alive by a reference until the stream has passed that work:
    torch's cache of pinned memory tracks only its own copies, and would
    hand a storage freed meanwhile to a new tensor (whose bytes the CPU
    writes at once). Not while capturing: a graph's memory must outlive
    the graph anyway.

    A call only appends its storages and stream (no CUDA call: right after
    a launch across the host link every host step is several times
    slower, bench/results/offload.md). Every MARK_EVERY calls, one event
    is recorded on each stream among them, after all their work; an entry
    goes, and its event is reused, once a later call finds its event
    passed. So a storage is released at most MARK_EVERY calls and one
    event after its last use."""

    MARK_EVERY = 8

    def __init__(self):
        self.lock = threading.Lock()
        self.pending = []                   # ((device, raw stream), storages) since the last mark
        self.entries = collections.deque()  # (event, storages) in the order marked
        self.spare = []                     # events whose work has passed

    def hold(self, storages, where=None):
        """Hold `storages` for the work just enqueued on the current stream
        (`where`: (current device, its stream handle), when known)."""
        if not storages or torch.cuda.is_current_stream_capturing():
            return
        if where is None:
            device = torch.cuda.current_device()
            where = (device, _cur(device))
        with self.lock:
            self.pending.append((where, storages))
            if len(self.pending) >= self.MARK_EVERY:
                self._mark()
                self._drain()

    def _mark(self):
        """An event after the pending work of each of its streams. The
        streams are torch's, kept for the life of the process, or the
        caller's own, which outlive the work the caller enqueued on them."""
        streams = {}
        for key, storages in self.pending:
            streams.setdefault(key, []).extend(storages)
        self.pending = []
        for (device, raw), storages in streams.items():
            ev = self.spare.pop() if self.spare else torch.cuda.Event()
            if device == torch.cuda.current_device() and raw == _cur():
                ev.record()
            else:
                ev.record(torch.cuda.ExternalStream(raw, device=device))
            self.entries.append((ev, storages))

    def _drain(self):
        entries, spare = self.entries, self.spare
        while entries and entries[0][0].query():
            spare.append(entries.popleft()[0])

    def drain(self, wait=False):
        """Mark what is pending and drop what has passed (wait=True: wait
        for it to pass first)."""
        with self.lock:
            if self.pending:
                self._mark()
            if wait:
                for ev, _ in self.entries:
                    ev.synchronize()
            self._drain()

    def pending_storages(self):
        """The storages still held (for tests)."""
        with self.lock:
            return [s for _, ss in self.pending for s in ss] + \
                [s for _, ss in self.entries for s in ss]


_held = _Held()


def _hold_pinned(tensors):
    """Keep the pinned storages among `tensors` alive until the current
    stream has passed the work just enqueued on them (_Held)."""
    seen, storages = set(), []
    for t in tensors:
        if t.is_cuda or not t.is_pinned():
            continue
        storage = t.untyped_storage()
        if storage.nbytes() == 0 or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        storages.append(storage)
    _held.hold(storages)


def _flat_bytes(t):
    return t.reshape(-1).view(torch.uint8)


def _host_only(*tensors):
    """No CUDA tensor among them: torch copies them on the CPU at once, so
    earlier work of the current stream (which may write pinned memory) must
    be done first."""
    if all(not t.is_cuda for t in tensors):
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.current_stream().synchronize()


def _row_bytes(t, what):
    if not t.is_contiguous() or t.dim() < 1:
        raise ValueError(f"p2pt.torch: {what} must be a contiguous tensor of rows (got a "
                         f"{'non-contiguous' if t.dim() else '0-d'} tensor of shape "
                         f"{tuple(t.shape)})")
    return math.prod(t.shape[1:]) * t.element_size()


def row_descriptors(dst, dst_index, src, src_index=None):
    """The (n, 3) int64 tensor of p2pt_copy_desc records that copies row
    src_index[i] of src to row dst_index[i] of dst (None: 0..n-1), built on
    the index's device with no host sync. An index past the tensor's rows,
    or below 0, gives a descriptor of NULL addresses, which a device batch
    skips."""
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
    if di.device != si.device:
        raise ValueError(f"p2pt.torch: dst_index is on {di.device}, src_index on {si.device}: "
                         f"they must be on one device")
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
    h.copy_batch_device(descs.data_ptr(), count.data_ptr(), max_count, ws.data_ptr(), _cur())
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
    h = _get(hid)
    h.copy(dst.data_ptr(), src.data_ptr(), src.nbytes, _cur())
    _hold_pinned((dst, src))


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
        _get(hid).copy_batch(descs, _cur())
        _hold_pinned(fast)
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
    rb = _row_bytes(dst, "dst")
    if _row_bytes(src, "src") != rb:
        raise ValueError(f"p2pt.torch: dst rows are {rb} bytes, src rows "
                         f"{_row_bytes(src, 'src')}: they must match")
    ref = dst_index if dst_index is not None else src_index
    if ref is None:
        raise ValueError("p2pt.torch: give dst_index, src_index or both")
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
    h = _get(hid)
    device = _device()
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
    _windows(h, device, (dst, src))
    st = _device_batch(h, descs, count, n, device)
    _hold_pinned((dst, src))
    return st.to(where)


@_copy_rows_op.register_fake
def _(dst, dst_index, src, src_index, count, hid):
    return torch.empty(8, dtype=torch.int32,
                       device=_rows_status_device(dst, src, dst_index, src_index))


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


# ------------------------------------------------------------- swap_blocks

def _block_bytes(t, name):
    """The bytes of one block of `t` (stride(0) elements, as vLLM), after
    the checks that keep every copy inside `t`'s own blocks and storage."""
    if t.dim() < 1:
        raise ValueError(f"p2pt.torch.swap_blocks: {name} is 0-d; expected blocks along dim 0")
    extent = 1
    for size, stride in zip(t.shape[1:], t.stride()[1:]):
        if size == 0:
            raise ValueError(f"p2pt.torch.swap_blocks: {name} of shape {tuple(t.shape)} has "
                             f"empty blocks")
        extent += (size - 1) * stride
    if t.stride(0) < extent:
        raise ValueError(f"p2pt.torch.swap_blocks: {name} has overlapping blocks: stride(0) is "
                         f"{t.stride(0)} elements, but a block spans {extent} (shape "
                         f"{tuple(t.shape)}, strides {t.stride()}; e.g. after expand); "
                         f"make it contiguous")
    bb = t.stride(0) * t.element_size()
    if t.shape[0]:
        end = (t.storage_offset() + t.shape[0] * t.stride(0)) * t.element_size()
        have = t.untyped_storage().nbytes()
        if end > have:
            raise ValueError(f"p2pt.torch.swap_blocks: {name}: its last block, padded to "
                             f"stride(0) = {t.stride(0)} elements, ends at byte {end} of a "
                             f"storage of {have} bytes; a block may not run past the storage")
    return bb


def _mapping_check(mapping):
    if mapping.dtype != torch.int64 or mapping.dim() != 2 or mapping.shape[1] != 2:
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping must be an int64 tensor of "
                         f"shape [n, 2] (src block, dst block); got {mapping.dtype} of shape "
                         f"{tuple(mapping.shape)}")
    if mapping.device.type not in ("cpu", "cuda"):
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping is on {mapping.device}; "
                         f"expected the CPU (a host batch) or the GPU (a device batch)")


def _swap_check(srcs, dsts, mapping=None):
    """Every check of swap_blocks that needs no value of the mapping: the
    block bytes of each layer."""
    if len(srcs) != len(dsts):
        raise ValueError(f"p2pt.torch.swap_blocks: {len(srcs)} src layers and {len(dsts)} dst "
                         f"layers; the lists must have the same length")
    if mapping is not None:
        _mapping_check(mapping)
    sizes = []
    for i, (s, d) in enumerate(zip(srcs, dsts)):
        if s.dtype != d.dtype or tuple(s.shape[1:]) != tuple(d.shape[1:]) or \
                s.stride() != d.stride():
            raise ValueError(f"p2pt.torch.swap_blocks: layer {i}: src is {s.dtype} of shape "
                             f"{tuple(s.shape)}, strides {s.stride()}; dst is {d.dtype} of "
                             f"shape {tuple(d.shape)}, strides {d.stride()}: blocks must have "
                             f"the same dtype, shape and strides on both sides")
        for t, role in ((s, "src"), (d, "dst")):
            _side(t, "swap_blocks", f"{role}[{i}]")
        _block_bytes(d, f"dst[{i}]")
        sizes.append(_block_bytes(s, f"src[{i}]"))
    return sizes


def _check_ids(ids, limits, side, col):
    """ValueError naming the first id of column `col` outside [0, limit) of
    its layer (the smallest limit over the layers: every layer gets every
    id)."""
    if ids.numel() == 0 or not limits:
        return
    layer = min(range(len(limits)), key=lambda i: limits[i])
    limit = limits[layer]
    bad = ((ids < 0) | (ids >= limit)).nonzero()
    if bad.numel():
        r = int(bad[0, 0])
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping[{r}, {col}] = {int(ids[r])}: "
                         f"{side} block ids must be in [0, {limit}) ({side}[{layer}] has "
                         f"{limit} blocks)")


def _disjoint(ranges):
    """Whether the [start, end) byte ranges share no byte."""
    spans = sorted(r for r in ranges if r[1] > r[0])
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


class _Layout:
    """What a swap needs of its two lists of layers and of no mapping: the
    checks of _swap_check, done once, and the numbers the descriptors are
    built from. A layout serves the same tensor objects again (see
    _layout), so a swap of the same layers pays for none of it twice."""

    def __init__(self, src, dst):
        self.sizes = _swap_check(src, dst)
        self.layers = len(self.sizes)
        self.src_ptrs = tuple(t.data_ptr() for t in src)
        self.dst_ptrs = tuple(t.data_ptr() for t in dst)
        self.src_rows = [t.shape[0] for t in src]
        self.dst_rows = [t.shape[0] for t in dst]
        self.slow = _pageable("swap_blocks", [(t, f"src[{i}]") for i, t in enumerate(src)] +
                              [(t, f"dst[{i}]") for i, t in enumerate(dst)])
        uniform = self.layers and len(set(self.sizes)) == 1
        self.block = self.sizes[0] if uniform else None
        self.min_src = min(self.src_rows) if self.layers else 0
        self.min_dst = min(self.dst_rows) if self.layers else 0
        self.same_rows = len(set(self.src_rows)) <= 1 and len(set(self.dst_rows)) <= 1
        # Pieces never race when every dst layer's blocks lie apart from every
        # other dst layer's and from every src layer's: then only a repeated
        # dst id (a block written twice) can, which the ids alone tell. Views
        # that interleave (layers of a [blocks, layers, ...] tensor, a src
        # and a dst in one storage) keep the check on addresses.
        dst_spans = [(p, p + r * b) for p, r, b in zip(self.dst_ptrs, self.dst_rows, self.sizes)]
        src_spans = [(p, p + r * b) for p, r, b in zip(self.src_ptrs, self.src_rows, self.sizes)]
        self.disjoint = _disjoint(dst_spans) and all(
            _disjoint([d, s]) for d in dst_spans for s in src_spans) if self.layers else True
        # One layer per storage: the windows to register and the pinned
        # blocks to hold, found once instead of per layer and call.
        seen, self.storages = set(), []
        for side, tensors in ((0, src), (1, dst)):
            for i, t in enumerate(tensors):
                st = t.untyped_storage()
                base = st.data_ptr()
                if base not in seen:
                    seen.add(base)
                    self.storages.append((side, i, base, st.nbytes(),
                                          not t.is_cuda and t.is_pinned()))
        self.pinned = [(side, i) for side, i, _, n, pin in self.storages if pin and n]
        # Every piece crosses the host link: one side all GPU memory, the
        # other all pinned host memory.
        kinds = [{t.is_cuda for t in src}, {t.is_cuda for t in dst}]
        self.crosses_link = not self.slow and {frozenset(k) for k in kinds} == \
            {frozenset({True}), frozenset({False})}
        # False once any of the tensors is gone: its id may then name
        # another tensor, which must not find this layout.
        alive = self.alive = [True]

        def gone(_ref, alive=alive):
            alive[0] = False

        self.refs = [weakref.ref(t, gone) for t in itertools.chain(src, dst)]
        self.meta = {}  # device index -> (bases and block bytes, limits) on that GPU
        # The layers as p2pt_block_layer records: a CPU mapping goes to
        # p2pt_copy_blocks_async, which builds the pieces in C.
        n_layers = self.layers
        self.c_layers = (_structs.BlockLayer * max(n_layers, 1))()
        for i in range(n_layers):
            self.c_layers[i] = _structs.BlockLayer(
                ctypes.sizeof(_structs.BlockLayer), self.dst_ptrs[i], self.src_ptrs[i],
                self.sizes[i], self.dst_rows[i], self.src_rows[i])
        self.c_layers_at = ctypes.addressof(self.c_layers)

    def serves(self, src, dst):
        """Whether this layout, found by the ids of `src` and `dst`, was made
        of these very tensors, which still point where they did (a tensor
        alive keeps its storage alive, so whatever was checked of the
        storage still holds). While every tensor it was made of lives, no
        other object has its id, so equal ids are the same tensors."""
        # One pass in C per list, not a Python loop per layer.
        return self.alive[0] and tuple(map(_data_ptr, src)) == self.src_ptrs and \
            tuple(map(_data_ptr, dst)) == self.dst_ptrs

    def _meta_cpu(self):
        layers = self.layers
        base = torch.tensor([self.dst_ptrs, self.src_ptrs, [0] * layers], dtype=torch.int64)
        block = torch.tensor(self.sizes, dtype=torch.int64)
        return (base.t().reshape(layers, 1, 3).contiguous(),
                block[:, None, None].expand(layers, 1, 3).contiguous(),
                torch.tensor([self.src_rows, self.dst_rows], dtype=torch.int64))

    def _meta(self, device):
        """((layers, 1, 3) dst base, src base, 0; (layers, 1, 3) block bytes;
        (2, layers) blocks of each src and dst layer), on `device`."""
        if device.type != "cuda":
            return self._meta_cpu()
        m = self.meta.get(device.index)
        if m is None:
            m = self.meta[device.index] = tuple(_meta_on(t, device) for t in self._meta_cpu())
        return m

    def pieces(self, mapping, device):
        """The (layers * n, 3) int64 descriptors, layer-major, on `device`
        (the mapping's): for layer l and row i, dst base + d * block bytes,
        src base + s * block bytes, block bytes; built as base + [d, s, 1]
        * block bytes, in three ops where every layer has one block size."""
        n, layers = mapping.shape[0], self.layers
        base, block, _ = self._meta(device)
        ids = torch.nn.functional.pad(mapping.flip(1), (0, 1), value=1)  # (n, 3): d, s, 1
        descs = torch.empty(layers, n, 3, dtype=torch.int64, device=device)
        if self.block is not None:
            torch.add(base, ids, alpha=self.block, out=descs)
        else:
            torch.add(base, ids * block, out=descs)
        return descs.view(layers * n, 3)

    def checked_pieces(self, mapping, device):
        """pieces() for a mapping whose ids cannot be read on the host: the
        pieces of an id outside its layer get NULL addresses, which no window
        holds, so the kernel skips them and the status record counts them,
        and nothing is written outside dst even where a window covers more
        than the view."""
        descs = self.pieces(mapping, device)
        n = mapping.shape[0]
        rows = self._meta(device)[2]
        if self.same_rows:
            # id // rows is 0 exactly for 0 <= id < rows: one division for
            # both columns, one any() for the row, the same for every layer.
            bad = torch.div(mapping, rows[:, 0], rounding_mode="floor").any(1)
            descs.view(self.layers, n, 3)[:, :, :2].masked_fill_(bad[None, :, None], 0)
        else:
            bad = torch.logical_or(
                torch.div(mapping[:, 0][None, :], rows[0][:, None], rounding_mode="floor"),
                torch.div(mapping[:, 1][None, :], rows[1][:, None], rounding_mode="floor"))
            descs[:, :2].masked_fill_(bad.view(-1, 1), 0)
        return descs

    def windows(self, h, device, src, dst):
        """Register a window for each storage not yet in one (on first use,
        or after release or a handle's close)."""
        for side, i, base, nbytes, _ in self.storages:
            w = h._windows.get((device, base))
            if w is None or w.nbytes < nbytes or not w.registered:
                t = (src, dst)[side][i]
                h.window(device, base, nbytes, t.untyped_storage())

    def hold_pinned(self, src, dst, where=None):
        """_hold_pinned for the pinned storages, known already."""
        if self.pinned:
            _held.hold([(src, dst)[side][i].untyped_storage() for side, i in self.pinned],
                       where)


_data_ptr = torch.Tensor.data_ptr
_layouts = {}  # (ids of the src tensors, ids of the dst tensors) -> _Layout
_LAYOUTS_MAX = 64


def _layout(src, dst):
    """The _Layout of these layers: the one made for these very tensors
    before, else a new one (all checks made; ValueError on bad layers).
    vLLM and the like swap the same per-layer tensors at every step."""
    key = (tuple(map(id, src)), tuple(map(id, dst)))
    lay = _layouts.get(key)
    if lay is not None and lay.serves(src, dst):
        return lay
    lay = _Layout(src, dst)
    if len(_layouts) >= _LAYOUTS_MAX:
        # Views made afresh at every call never come back: start over
        # rather than keep their weak references.
        _layouts.clear()
    _layouts[key] = lay
    return lay


# The bases and block bytes of a set of layers, in GPU memory, by value:
# the same set always gives the same contents, so an entry is never stale,
# and it stays alive for every graph that captured a build reading it.
_meta_cache = {}


def _meta_on(meta, device):
    key = (device.index, tuple(meta.shape), tuple(meta.flatten().tolist()))
    m = _meta_cache.get(key)
    if m is None:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("p2pt.torch.swap_blocks: these layers have not been swapped "
                               "before, and a graph is being captured: run the swap once "
                               "before capturing (it copies the layers' addresses to the GPU)")
        m = _meta_cache[key] = meta.to(device)
    return m


def _check_overlaps(descs, n):
    """Refuse a batch whose pieces would race: a destination written twice,
    or read by another piece (pieces run in any order, at once)."""
    d, s, b = descs[:, 0], descs[:, 1], descs[:, 2]
    order = torch.argsort(d)
    ds, de = d[order], d[order] + b[order]
    clash = (ds[1:] < de[:-1]).nonzero()
    if clash.numel():
        k = int(clash[0, 0])
        p, q = sorted((int(order[k]), int(order[k + 1])))
        raise ValueError(f"p2pt.torch.swap_blocks: pieces write the same bytes: block_mapping "
                         f"row {p % n} of layer {p // n} and row {q % n} of layer {q // n}; "
                         f"each destination block may appear once")
    # The last destination starting before a source's end is the only one
    # that can overlap it: destinations are disjoint, so their ends rise too.
    idx = torch.searchsorted(ds, s + b) - 1
    hit = (idx >= 0) & (de[idx.clamp(min=0)] > s)
    bad = hit.nonzero()
    if bad.numel():
        p = int(bad[0, 0])
        q = int(order[int(idx[p])])
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping row {p % n} of layer {p // n} "
                         f"reads bytes that row {q % n} of layer {q // n} writes; a block may "
                         f"not be both a source and a destination")


def _blocks_view(t, bb):
    """`t` as (blocks, bb) bytes over its storage: each row a whole padded
    block, as swap_blocks copies it."""
    raw = torch.empty(0, dtype=torch.uint8, device=t.device)
    raw.set_(t.untyped_storage(), t.storage_offset() * t.element_size(), (t.shape[0], bb),
             (bb, 1))
    return raw


def _swap_by_torch(srcs, dsts, mapping, sizes):
    _host_only(*srcs, *dsts)
    for s, d, bb in zip(srcs, dsts, sizes):
        picked = _blocks_view(s, bb).index_select(0, mapping[:, 0].to(s.device))
        _blocks_view(d, bb).index_copy_(0, mapping[:, 1].to(d.device), picked.to(d.device))


_done_records = {}  # pieces -> the CPU record of a batch that copied them all


def _done(pieces, device):
    """The status record of a host batch that copied every piece (a copy
    of one made once per count: cheaper than building it)."""
    if pieces < 2**31:
        rec = _done_records.get(pieces)
        if rec is None:
            if len(_done_records) >= 256:
                _done_records.clear()
            rec = _done_records[pieces] = torch.tensor([pieces, pieces, 0, -1, 0, 0, 0, 0],
                                                       dtype=torch.int32)
        return rec.clone() if device.type == "cpu" else rec.to(device)
    return _status(pieces, pieces, 0, _UINT32_MAX, 0, device)


def _swap(src, dst, block_mapping, hid, bump=None):
    """swap_blocks itself: the body of p2pt::swap_blocks. `bump`: called
    just before the swap is enqueued (swap_blocks' direct path bumps the
    dst version counters there)."""
    if len(src) != len(dst):
        _swap_check(src, dst)  # raises, naming both lengths
    _mapping_check(block_mapping)
    lay = _layout(src, dst)
    n, layers = block_mapping.shape[0], lay.layers
    pieces = n * layers
    if block_mapping.is_cuda and not lay.slow:
        return _swap_on_gpu(lay, src, dst, block_mapping, hid, bump)
    mapping = block_mapping.cpu()  # a sync only in the slow path: a GPU mapping, a pageable side
    if pieces == 0:
        return _no_pieces(block_mapping.device)
    st = _done(pieces, block_mapping.device)
    if bump is not None:
        bump()
    if not lay.slow:
        # One call: the C library checks the ids and builds the pieces. What
        # it refuses, the checks here explain (a ValueError naming the row)
        # where the mapping is at fault. Everything else is done before it:
        # right after a launch across the host link, host steps are slow.
        mapping = mapping.contiguous()
        h = _get(hid)
        device = _device()
        _ready(h, device)
        stream = _cur(device)
        try:
            h.copy_blocks_at(lay.c_layers_at, lay.layers, mapping.data_ptr(), n, stream)
        except Error as e:
            if e.status == Status.INVALID_ARGUMENT:
                _host_checks(lay, mapping, n)
            raise
        lay.hold_pinned(src, dst, (device, stream))
        return st
    _host_checks(lay, mapping, n)
    _swap_by_torch(src, dst, mapping, lay.sizes)
    return st


def _host_checks(lay, mapping, n):
    """The checks of a CPU mapping, in torch (ValueError naming the first
    bad row): every id in its layers, no block written twice or written
    and read."""
    _check_ids(mapping[:, 0], lay.src_rows, "src", 0)
    _check_ids(mapping[:, 1], lay.dst_rows, "dst", 1)
    _check_overlaps(lay.pieces(mapping, mapping.device), n)


@torch.library.custom_op("p2pt::swap_blocks", mutates_args=("dst",))
def _swap_blocks_op(src: List[torch.Tensor], dst: List[torch.Tensor],
                    block_mapping: torch.Tensor, hid: int) -> torch.Tensor:
    return _swap(src, dst, block_mapping, hid)


def _checked_pieces(src, dst, mapping, sizes, device):
    """_Layout.checked_pieces for these layers (sizes: their block bytes)."""
    return _Layout(src, dst).checked_pieces(mapping, device)


# A GPU mapping between GPU memory and pinned host memory is bound by the
# host link, which the device batch kernel fills from 8 CTAs on (measured on
# an H100: 8 to 32 CTAs move 128 MiB of 16 KiB blocks at the same speed,
# every SM more slowly, and a matmul beside it loses what the extra CTAs
# hold). Where no budget is set, such a swap runs on the handle of this
# budget; the C library cannot know it, as the pieces are read on the GPU.
LINK_CTAS = 8
_budget_of = {}  # handle pointer -> its P2P_TRANSPORT_SM_BUDGET (-1: none)


def _link_hid(hid, lay):
    """The handle for a GPU mapping of `lay`: hid, or where it is the
    default handle without a budget and the swap crosses the host link,
    the handle of LINK_CTAS."""
    if hid != 0 or not lay.crosses_link:
        return hid
    h = handle()
    budget = _budget_of.get(h.pointer)
    if budget is None:
        budget = _budget_of[h.pointer] = h.properties()["sm_budget"]
    return -1 - LINK_CTAS if budget < 0 else hid


def _swap_on_gpu(lay, src, dst, mapping, hid, bump=None):
    h = _get(_link_hid(hid, lay))
    device = _device()
    gpu = torch.device("cuda", device)
    if mapping.device != gpu:
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping is on {mapping.device}, the "
                         f"stream on {gpu}: a GPU mapping must be on the stream's device")
    n, layers = mapping.shape[0], lay.layers
    pieces = n * layers
    if pieces == 0:
        return _no_pieces(gpu)
    _ready(h, device)
    cap = _batch_max(h)
    if pieces > cap:
        raise ValueError(f"p2pt.torch.swap_blocks: {n} blocks x {layers} layers = {pieces} "
                         f"pieces, over the {cap} one device batch takes")
    descs = lay.checked_pieces(mapping, gpu)
    count = _count(pieces, gpu)
    lay.windows(h, device, src, dst)
    if bump is not None:
        bump()
    st = _device_batch(h, descs, count, pieces, device)
    lay.hold_pinned(src, dst)
    return st


_counts = {}  # (device, pieces) -> a GPU int32 holding pieces, read by device batches


def _count(pieces, gpu):
    """A GPU tensor holding `pieces`, made once per value: no batch writes it."""
    key = (gpu.index, pieces)
    c = _counts.get(key)
    if c is None:
        if len(_counts) >= 256:
            _counts.clear()
        c = _counts[key] = torch.full((1,), pieces, dtype=torch.int32, device=gpu)
    return c


_caps = {}


def _batch_max(h):
    cap = _caps.get(h.pointer)
    if cap is None:
        cap = _caps[h.pointer] = h.properties()["device_batch_max"]
    return cap


@_swap_blocks_op.register_fake
def _(src, dst, block_mapping, hid):
    from torch._guards import TracingContext
    if TracingContext.try_get() is not None and any(d.storage_offset() != 0 for d in dst):
        _leave_graph()
    return torch.empty(8, dtype=torch.int32, device=block_mapping.device)


def _leave_graph():
    """Keep a swap whose dst layers start inside their storage (views such
    as pool.unbind(0)) out of a compiled graph: inductor copies such a
    mutated view back through a copy of its storage that it reads from the
    view's first byte instead of the storage's, past the storage's end (a
    crash, or bytes written outside the tensor). torch.compile answers
    this exception of the fake kernel with a graph break, and runs the swap
    eagerly there (fullgraph=True: an error naming the operation)."""
    if "compile" not in _warned:
        _warned.add("compile")
        warnings.warn("p2pt.torch.swap_blocks: dst layers that are views starting inside their "
                      "storage run outside the compiled graph (inductor mishandles such mutated "
                      "views); pass tensors of their own to keep the swap in the graph",
                      stacklevel=2)
    from torch._subclasses.fake_tensor import UnsupportedOperatorException
    raise UnsupportedOperatorException(torch.ops.p2pt.swap_blocks.default)


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
    mapping between GPU memory and pinned host memory takes LINK_CTAS (8)
    CTAs, which fill the host link; a CPU mapping takes what the C
    library's link lines give.
    """
    hid = _hid(handle, sm_budget)
    (srcs, plain_src), (dsts, plain_dst) = _layers(src, "src"), _layers(dst, "dst")
    with _stream(stream):
        if plain_src and plain_dst and _plain_eager(dsts, block_mapping):
            # The versions go up just before the launch where there is one
            # (host steps after it are slow), else after the swap's body.
            bumped = []
            st = _swap(srcs, dsts, block_mapping, hid, lambda: bumped.append(_mutated(dsts)))
            if not bumped:
                _mutated(dsts)
        else:
            st = torch.ops.p2pt.swap_blocks(srcs, dsts, block_mapping, hid)
        if check:
            if torch.compiler.is_compiling():
                raise RuntimeError("p2pt.torch.swap_blocks: check=True reads the status on the "
                                   "host, which a compiled graph cannot; call check_status "
                                   "outside it")
            _check_swap(st, block_mapping.shape[0] if block_mapping.dim() else 0)
    return st


_Tensor = torch.Tensor
_PLAIN = {_Tensor}
_requires_grad = operator.attrgetter("requires_grad")
_is_fn_mode = getattr(torch._C, "_is_torch_function_mode_enabled", None)
_dispatch_depth = getattr(torch._C, "_len_torch_dispatch_stack", None)
_tracing = getattr(torch._C, "_get_tracing_state", None)
_functorch = getattr(getattr(torch._C, "_functorch", None), "maybe_current_level", None)
EAGER_DIRECT = None not in (_is_fn_mode, _dispatch_depth, _tracing, _functorch)


def _plain_eager(dsts, mapping):
    """Whether swap_blocks may run its body without the dispatcher, given
    layers that are plain tensors (_layers): eager, no mode, tracer or
    transform that must see the operation, no dst that autograd follows. The dispatcher's round trip of
    two lists of tensors costs more than the swap's own work on the host,
    and an eager call with none of these would reach the same body
    (_swap) through it; everything else still goes through the operation."""
    if not EAGER_DIRECT or torch.compiler.is_compiling() or _is_fn_mode() or \
            _dispatch_depth() or _tracing() is not None or _functorch() is not None:
        return False
    # One pass in C, not a Python loop per layer.
    return type(mapping) is _Tensor and not any(map(_requires_grad, dsts))


def _mutated(dsts):
    """Bump the version counter of every dst, as the operation's in-place
    kernel does, so that autograd sees the write (inference tensors have
    no counter)."""
    bump = torch.autograd.graph.increment_version
    try:
        bump(dsts)
    except (RuntimeError, TypeError, AttributeError):
        for t in dsts:
            if not t.is_inference():
                bump(t)


def _check_swap(st, n):
    s = batch_status(st)
    if s.skipped:
        p = s.first_bad
        where = f"block_mapping row {p % n} of layer {p // n}" if n else f"piece {p}"
        check_status(st, f"p2pt.torch.swap_blocks (first skipped: {where})")
