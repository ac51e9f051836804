# SPDX-License-Identifier: Apache-2.0
"""The handle cache of p2pt.torch (the default handle and one per SM
budget, made at first use), the int an operation carries for its handle
(_hid) and the handle it names (_get), the current device and stream, a
device prepared before a graph is captured (prepare), and the windows of
storages (register_window, _windows). It imports no module of the package."""
import functools
import os
import threading
from contextlib import nullcontext

import torch

from .. import _handle

_lock = threading.Lock()
_default = None
_budgets = {}  # sm_budget -> Handle


def _policy_options(options):
    auto = options is None and "P2P_TRANSPORT" not in os.environ
    return {"P2P_TRANSPORT": "auto"} if auto else options


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
        elif transport is not None and _default.properties()["transport"] != transport.lower():
            raise ValueError(f"p2pt.torch's default handle already exists with transport "
                             f"{_default.properties()['transport']!r}; pass "
                             f"handle=p2pt.Handle(...) instead")
        return _default


def _budget_value(sm_budget):
    if isinstance(sm_budget, bool) or not isinstance(sm_budget, int) or sm_budget < 0:
        raise ValueError(f"p2pt.torch: sm_budget={sm_budget!r}: expected None or an int >= 0 "
                         f"(0: no kernel at all, N: at most N CTAs)")
    return sm_budget


def _budget_handle(budget):
    with _lock:
        if budget not in _budgets:
            options = dict(_policy_options(None) or {}, P2P_TRANSPORT_SM_BUDGET=budget)
            _budgets[budget] = _handle.Handle(options=options)
        return _budgets[budget]


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
    if hid == 0:  # made once and never replaced: read without the lock once it is
        return _default if _default is not None else handle()
    if hid < 0:
        return _budget_handle(-1 - hid)
    h = _handle.lookup(hid)
    if h is None:
        raise ValueError("p2pt.torch: the handle of this operation is closed")
    return h


_device = torch.cuda.current_device


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


def _eager(fn, why):
    """`fn` run as it runs eagerly under torch.compile (a graph break), with
    `why` as the reason torch gives where a graph break is an error
    (fullgraph=True), where torch.compiler.disable takes a reason (since
    pytorch/pytorch#150341, 2025)."""
    try:
        return torch.compiler.disable(fn, reason=why)
    except TypeError:
        return torch.compiler.disable(fn)


def _eager_on_a_stream(fn):
    """`fn` (a call with a `stream` keyword), run as it runs eagerly where
    torch.compile traces it with a stream given: dynamo does not enter a
    stream's context for the operations in it (on one H200 they ran on
    the default stream with the eager, aot_eager and inductor backends,
    bench/results/peer.md 5zd), while p2pt's operations enqueue on the
    stream current when they run. A graph break, then."""
    eager = _eager(fn, f"p2pt {fn.__name__} given stream=: dynamo would not enter the stream, "
                       f"so it runs eagerly (call it outside the compiled function to keep the "
                       f"rest whole)")

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs.get("stream") is not None and torch.compiler.is_compiling():
            return eager(*args, **kwargs)
        return fn(*args, **kwargs)
    return call


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _cur(device=None):
    """The current stream's handle (of `device`, an index, else the current
    device): torch's raw handle where it has the call (what its compiled
    code uses), which makes no Stream object (a few us a call)."""
    if _raw_stream is not None and (device is None or type(device) is int):
        return _raw_stream(torch.cuda.current_device() if device is None else device)
    return torch.cuda.current_stream(device).cuda_stream


def prepare(device=None, handle=None):
    """Compile and load p2pt's kernels for `device` (default: the current
    one) before a graph is captured."""
    h = _get(_hid(handle))
    h.prepare(_device() if device is None else torch.device("cuda", device).index)


def register_window(tensor, *, handle=None, device=None):
    """Register the storage of `tensor` (GPU or pinned host memory) for
    device batches on `device` (default: the current device); p2pt.Window,
    released by release(), when the storage is freed, or when the handle
    closes."""
    s = tensor.untyped_storage()
    if s.nbytes() == 0:
        raise ValueError("p2pt.torch.register_window: the tensor's storage is empty: a window "
                         "needs at least one byte")
    return _windows(_get(_hid(handle)), _device() if device is None else device, [s])[0]


def _windows(h, device, storages):
    """A window of each storage, owned by the storage object (which lives as
    long as the memory, whatever views of it come and go), so that views
    made afresh at every call find the registration of the first. An empty
    storage has no bytes a batch could touch: None, and nothing registered
    (p2pt refuses a window of 0 bytes). A storage that resize_ moved gives
    up its window at the old address as it takes the new one."""
    return tuple(h.window(device, s.data_ptr(), s.nbytes(), s, moves=True) if s.nbytes()
                 else None for s in storages)
