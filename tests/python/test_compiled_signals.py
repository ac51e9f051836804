# SPDX-License-Identifier: Apache-2.0
"""p2pt.distributed.signal and wait under torch.compile act on the
semaphore itself, not on a copy: AOTAutograd without re-inplacing
(aot_eager) runs an operation that mutates a tensor on a copy of it and
copies that back, so a compiled wait would poll a copy that no signal
reaches. On the CPU, the library's calls stood in for, the semaphore's own
address reaches them with each backend; on a GPU, a compiled wait sees a
signal from another stream, and a compiled signal writes the semaphore
that an eager wait reads. The GPU tests skip without a CUDA device."""
import contextlib
import inspect
import types

import pytest

torch = pytest.importorskip("torch")
try:
    import p2pt
    import p2pt.distributed as pd
    from p2pt.distributed import _signals
except ImportError as e:  # p2pt.distributed needs torch.distributed
    pytest.skip(f"p2pt.distributed: {e}", allow_module_level=True)

BACKENDS = ("aot_eager", "inductor")


def _recorded(monkeypatch):
    """The calls that signal and wait make of the library, recorded with
    the semaphore address each is given, on the CPU (no handle, no
    stream)."""
    calls = []
    h = types.SimpleNamespace(
        signal=lambda sem, stream=None: calls.append(("signal", sem)),
        wait=lambda sem, count=1, stream=None: calls.append(("wait", sem, count)))
    monkeypatch.setattr(_signals, "_row", lambda sem: sem)
    monkeypatch.setattr(_signals._handles, "_get", lambda hid: h)
    monkeypatch.setattr(_signals._handles, "_ready", lambda h, device: None)
    monkeypatch.setattr(_signals._handles, "_cur", lambda device=None: 0)
    monkeypatch.setattr(_signals._handles, "_stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return calls


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_signal_and_wait_reach_the_semaphore_itself(monkeypatch, backend):
    calls = _recorded(monkeypatch)
    sems = torch.zeros(4, _signals.SEMAPHORE_WORDS, dtype=torch.int64)

    def step(sem, other):
        pd.signal(other)
        pd.wait(sem, 2)
        return sem.sum() + other.sum()

    torch._dynamo.reset()
    torch.compile(step, backend=backend)(sems[1], sems[3])
    assert calls == [("signal", sems[3].data_ptr()), ("wait", sems[1].data_ptr(), 2)], \
        f"{backend}: the library was given another address than the semaphore's"


def test_under_fullgraph_signal_and_wait_say_why_they_leave_the_graph(monkeypatch):
    _recorded(monkeypatch)
    sem = torch.zeros(_signals.SEMAPHORE_WORDS, dtype=torch.int64)
    says = "acts on a semaphore at its address" \
        if "reason" in inspect.signature(torch.compiler.disable).parameters else ""
    for name, call in (("signal", lambda s: pd.signal(s)), ("wait", lambda s: pd.wait(s, 1))):
        torch._dynamo.reset()
        with pytest.raises(torch._dynamo.exc.Unsupported, match=says) as e:
            torch.compile(call, backend="eager", fullgraph=True)(sem)
        assert not says or f"p2pt.distributed.{name}" in str(e.value)


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")


def _handle():
    """A handle whose waits give up after 5 s (counted in the semaphore),
    so that a wait that polls the wrong memory fails the test instead of
    holding the GPU; its kernels loaded by one eager signal and wait."""
    h = p2pt.Handle(options={"P2P_TRANSPORT_WAIT_TIMEOUT_MS": 5000})
    warm = pd.semaphores(1)
    pd.signal(warm[0], handle=h)
    pd.wait(warm[0], 1, handle=h)
    torch.cuda.synchronize()
    return h


def _timeouts(sem):
    """The count of waits on `sem` that gave up."""
    return int(sem[p2pt._handle.SEMAPHORE_TIMEOUTS // 8].item())


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compiled_wait_sees_a_signal_from_another_stream(backend):
    h = _handle()
    sem = pd.semaphores(1)[0]
    torch._dynamo.reset()
    waits = torch.compile(lambda sem: pd.wait(sem, 1, handle=h), backend=backend)
    # The side stream is made before the wait is queued: PyTorch's first
    # torch.cuda.Stream() in a process waited on the host for the GPU (5.0
    # s, the wait's timeout, on one H200 with PyTorch 2.11). The wait is
    # compiled once with its signal already there, for the same reason.
    side = torch.cuda.Stream()
    pd.signal(sem, handle=h)
    waits(sem)
    torch.cuda.synchronize()
    waits(sem)  # holds the current stream until the signal below
    with torch.cuda.stream(side):
        pd.signal(sem, handle=h)
    torch.cuda.synchronize()
    assert _timeouts(sem) == 0, f"{backend}: the compiled wait gave up, unsignalled"
    h.close()


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compiled_signal_writes_the_semaphore_an_eager_wait_reads(backend):
    h = _handle()
    sems = pd.semaphores(1)
    seen, real = [], h.signal
    h.signal = lambda sem, stream=None: (seen.append(sem), real(sem, stream))[1]
    torch._dynamo.reset()
    signals = torch.compile(lambda sem: pd.signal(sem, handle=h), backend=backend)
    for _ in range(3):
        signals(sems[0])
    pd.wait(sems[0], 3, handle=h)
    torch.cuda.synchronize()
    assert seen == [sems[0].data_ptr()] * 3, f"{backend}: signalled another address"
    assert _timeouts(sems[0]) == 0, f"{backend}: the eager wait gave up"
    h.close()
