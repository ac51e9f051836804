# SPDX-License-Identifier: Apache-2.0
"""p2pt.torch's hold on pinned storages (_Held, one per handle) across
streams, on a GPU: swaps queued on a stream of the caller's are marked,
when another stream is the current one, by an event on that stream itself
(an ExternalStream of its handle), and their pinned pool stays held until
that stream, not the current one, has passed them. Skips without a GPU."""
import pytest

torch = pytest.importorskip("torch")
import p2pt.torch as pt  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="PyTorch sees no CUDA device")

LAYERS, BLOCKS, BLOCK = 2, 16, (4, 8, 64)  # bf16: 4 KiB a block


def cache(pinned):
    if pinned:
        return torch.zeros(LAYERS, BLOCKS, *BLOCK, dtype=torch.bfloat16, pin_memory=True)
    return torch.randn(LAYERS, BLOCKS, *BLOCK, device="cuda").to(torch.bfloat16)


def test_swaps_on_another_stream_hold_their_pool_until_that_stream_passed_them():
    src, pool = cache(False), cache(True)
    m = torch.stack([torch.arange(8), torch.arange(8, 16)], 1)
    # The first swap of the process makes the handle and loads the kernels:
    # done here, before the clock of the sleep below starts.
    pt.swap_blocks(list(src.unbind(0)), list(pool.unbind(0)), m)
    torch.cuda.synchronize()
    held = pt._held(pt.handle())  # what the default handle holds
    held.drain(wait=True)
    assert held.pending_storages() == []
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(1_000_000_000)  # ~0.5 s before `side` reaches the swaps
    for _ in range(held.MARK_EVERY - 1):
        pt.swap_blocks(list(src.unbind(0)), list(pool.unbind(0)), m, stream=side)
    assert len(held.pending) == held.MARK_EVERY - 1 and not held.entries
    # The call that marks, on the current stream, with another pool.
    other_src, other_pool = cache(False), cache(True)
    pt.swap_blocks(list(other_src.unbind(0)), list(other_pool.unbind(0)), m)
    torch.cuda.current_stream().synchronize()
    assert not held.pending and len(held.entries) == 2
    held.drain()
    kept = {s.data_ptr() for s in held.pending_storages()}
    assert pool.untyped_storage().data_ptr() in kept, \
        "the pool was let go before the stream it was used on passed the swaps"
    assert not side.query()
    side.synchronize()
    held.drain()
    assert held.pending_storages() == []
    assert torch.equal(pool[:, 8:].cpu(), src[:, :8].cpu())
    assert torch.equal(other_pool[:, 8:].cpu(), other_src[:, :8].cpu())
