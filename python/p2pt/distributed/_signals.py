# SPDX-License-Identifier: Apache-2.0
"""Semaphores for ranks (docs/SIGNALS.md): a tensor of semaphores in this
rank's GPU memory, shared with the group, and signal and wait as
operations of torch.library, so a captured CUDA graph keeps them and a
replay signals and waits again."""
import torch

from .. import _handle
from ..torch import _handles
from ._args import described, positive_int

SEMAPHORE_WORDS = _handle.SEMAPHORE_BYTES // 8


def semaphores(n, device=None):
    """`n` semaphores in this rank's GPU memory: an int64 tensor of shape
    (n, 4), zeroed (each row is one P2PT_SEMAPHORE_BYTES semaphore). Share
    it (p2pt.distributed.share) so that peers signal it; wait on a row of
    your own."""
    positive_int("p2pt.distributed.semaphores", "n", n)
    device = torch.cuda.current_device() if device is None else device
    return torch.zeros(n, SEMAPHORE_WORDS, dtype=torch.int64, device=torch.device("cuda", device))


def _signal_body(sem: torch.Tensor, hid: int) -> None:
    h = _handles._get(hid)
    device = torch.cuda.current_device()
    _handles._ready(h, device)
    h.signal(sem.data_ptr(), _handles._cur(device))


def _wait_body(sem: torch.Tensor, count: int, hid: int) -> None:
    h = _handles._get(hid)
    device = torch.cuda.current_device()
    _handles._ready(h, device)
    h.wait(sem.data_ptr(), count, _handles._cur(device))


_signal_op = torch.library.custom_op("p2pt_dist::signal", _signal_body, mutates_args=("sem",))
_wait_op = torch.library.custom_op("p2pt_dist::wait", _wait_body, mutates_args=("sem",))


@_signal_op.register_fake
def _(sem, hid):
    return None


@_wait_op.register_fake
def _(sem, count, hid):
    return None


_Tensor, _compiling = torch.Tensor, torch.compiler.is_compiling
_has_torch_function = torch.overrides.has_torch_function
_bump = torch.autograd.graph.increment_version


def direct(*tensors):
    """Whether the dispatcher would only call an operation's body on
    `tensors` (nothing compiling, plain tensors, no __torch_function__
    mode): then the caller runs the body itself and bumps the versions of
    what it mutates, as the dispatcher would. The dispatcher's part costs
    ~20 us of host time a call, most of an eager signal or batch
    (bench/experiments/ep_host.py)."""
    return not _compiling() and all([type(t) is _Tensor for t in tensors]) and \
        not _has_torch_function(tensors)


def bump(*tensors):
    """The versions of `tensors` bumped, as for an in-place write."""
    _bump(tensors)


# A signal and a wait act on the semaphore at its address, which peers
# write too, while torch.compile treats an operation that mutates a tensor
# as a function of it: AOTAutograd without re-inplacing (aot_eager) runs it
# on a copy and copies that back (a wait would poll a copy no peer signals;
# a copy written back over a semaphore loses the signals that came
# between), and whether inductor re-inplaces is its own choice. Under
# torch.compile they run as they do eagerly, a graph break each.
def _by_address(fn):
    return _handles._eager(fn, f"p2pt.distributed.{fn.__name__} acts on a semaphore at its "
                               f"address, where torch.compile may put a copy: it runs eagerly "
                               f"(call it between compiled functions)")


def _row(sem):
    if not isinstance(sem, torch.Tensor) or sem.dtype != torch.int64 or \
            sem.numel() != SEMAPHORE_WORDS or not sem.is_cuda or not sem.is_contiguous():
        raise ValueError(f"p2pt.distributed: a semaphore is one row of semaphores(n) "
                         f"({SEMAPHORE_WORDS} int64 words of GPU memory), this rank's or a "
                         f"peer's from share(), not {described(sem)}")
    return sem


@_by_address
def signal(sem, *, stream=None, handle=None):
    """Signal semaphore `sem` (a row of a peer's semaphores, from share(), or
    of your own) once everything before it on the stream is visible to its
    GPU."""
    hid = _handles._hid(handle)
    with _handles._stream(stream):
        if direct(_row(sem)):
            bump(sem)
            _signal_body(sem, hid)
        else:
            torch.ops.p2pt_dist.signal(sem, hid)


@_by_address
def wait(sem, count=1, *, stream=None, handle=None):
    """Hold the stream until `count` more signals reach `sem`, a row of this
    rank's own semaphores; work after it sees what the signallers wrote."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count < 1 << 32:
        # Past 32 bits the C call would take the count modulo 2^32; the
        # library refuses counts above its own maximum with its message.
        raise ValueError(f"p2pt.distributed.wait: count must be an int of 1 to 2^32 - 1, "
                         f"not {count!r}")
    hid = _handles._hid(handle)
    with _handles._stream(stream):
        if direct(_row(sem)):
            bump(sem)
            _wait_body(sem, count, hid)
        else:
            torch.ops.p2pt_dist.wait(sem, count, hid)
