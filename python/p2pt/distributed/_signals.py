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


@torch.library.custom_op("p2pt_dist::signal", mutates_args=("sem",))
def _signal_op(sem: torch.Tensor, hid: int) -> None:
    h = _handles._get(hid)
    device = torch.cuda.current_device()
    _handles._ready(h, device)
    h.signal(sem.data_ptr(), _handles._cur(device))


@_signal_op.register_fake
def _(sem, hid):
    return None


@torch.library.custom_op("p2pt_dist::wait", mutates_args=("sem",))
def _wait_op(sem: torch.Tensor, count: int, hid: int) -> None:
    h = _handles._get(hid)
    device = torch.cuda.current_device()
    _handles._ready(h, device)
    h.wait(sem.data_ptr(), count, _handles._cur(device))


@_wait_op.register_fake
def _(sem, count, hid):
    return None


def _row(sem):
    if not isinstance(sem, torch.Tensor) or sem.dtype != torch.int64 or \
            sem.numel() != SEMAPHORE_WORDS or not sem.is_cuda or not sem.is_contiguous():
        raise ValueError(f"p2pt.distributed: a semaphore is one row of semaphores(n) "
                         f"({SEMAPHORE_WORDS} int64 words of GPU memory), this rank's or a "
                         f"peer's from share(), not {described(sem)}")
    return sem


def signal(sem, *, stream=None, handle=None):
    """Signal semaphore `sem` (a row of a peer's semaphores, from share(), or
    of your own) once everything before it on the stream is visible to its
    GPU."""
    hid = _handles._hid(handle)
    with _handles._stream(stream):
        torch.ops.p2pt_dist.signal(_row(sem), hid)


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
        torch.ops.p2pt_dist.wait(_row(sem), count, hid)
