# SPDX-License-Identifier: Apache-2.0
"""Memory another process shared through torch.multiprocessing (CUDA IPC,
docs/IMPORTED_MEMORY.md): PyTorch opens the handle in the owning device's
context, where GPU 0's kernels cannot reach it. A copy into it from GPU 0
goes to the copy engine under auto and lands; a device batch (row copy)
and a tma copy are refused with the cause and the remedy, nothing
written; the exporting process checks its bytes. Skips below two GPUs."""
import pytest

try:
    import torch
    import torch.multiprocessing as mp
except ImportError as e:
    pytest.skip(f"no PyTorch: {e}", allow_module_level=True)
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA devices: PyTorch sees fewer", allow_module_level=True)

N = (1 << 20) + 13
POISON = 0xA5


def exporter(q_out, q_in):
    """GPU 1: a poisoned buffer, shared; then the verdict on its bytes."""
    buf = torch.full((N,), POISON, dtype=torch.uint8, device="cuda:1")
    torch.cuda.synchronize(1)
    q_out.put(buf)
    want = q_in.get()  # (offset, bytes) the importer wrote with the copy engine
    got = buf.cpu()
    expect = torch.full((N,), POISON, dtype=torch.uint8)
    off, data = want
    expect[off:off + len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    q_out.put(bool(torch.equal(got, expect)))


def test_ipc_memory_goes_to_the_copy_engine_and_kernels_refuse_it():
    import p2pt
    import p2pt.torch as pt
    ctx = mp.get_context("spawn")
    q_out, q_in = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=exporter, args=(q_out, q_in))
    child.start()
    try:
        remote = q_out.get(timeout=120)  # opened by PyTorch in GPU 1's context
        assert remote.device.index == 1
        torch.cuda.set_device(0)
        with p2pt.Handle(transport="auto") as h:
            h.peer_enable(0, 1)
            src = torch.randint(0, 256, (4097,), dtype=torch.uint8, device="cuda:0")
            choice = h.explain_copy(remote.data_ptr() + 5, src.data_ptr(), src.numel(),
                                    torch.cuda.current_stream(0).cuda_stream)
            assert choice.transport == "ce", choice.reason
            assert "opened in its own context" in choice.reason
            pt.copy_(remote[5:5 + src.numel()], src, handle=h)
            torch.cuda.synchronize(0)
            # A device batch: a kernel on GPU 0 cannot reach it.
            idx = torch.arange(4, device="cuda:0")
            with pytest.raises(p2pt.Error) as err:
                pt.copy_rows_(remote[:4 * 64].view(4, 64), idx,
                              torch.zeros(4, 64, dtype=torch.uint8, device="cuda:0"), idx,
                              handle=h)
            assert err.value.status == 4
            assert "opened in device 1's context" in err.value.text
        with p2pt.Handle(transport="tma") as t:
            # Co-aligned (a tma copy that is not goes to the copy engine).
            with pytest.raises(p2pt.Error) as err:
                t.copy(remote.data_ptr() + 9008 + src.data_ptr() % 16, src.data_ptr(), 16,
                       torch.cuda.current_stream(0).cuda_stream)
            assert "opened in device 1's context" in err.value.text
        q_in.put((5, bytes(src.cpu().tolist())))
        assert q_out.get(timeout=120), "the exporter saw other bytes than the copy wrote"
        del remote
    finally:
        child.join(timeout=120)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
