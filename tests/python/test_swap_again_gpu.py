# SPDX-License-Identifier: Apache-2.0
"""p2pt.torch.swap_blocks on layers swapped before, on a GPU with pinned
host memory: the same layers swapped again with a CPU or a GPU mapping
find the layout made at their first swap (none is made again), land every
byte, bump every dst version and hold the pinned pool (a GPU mapping's
bad id skipped and counted, never written); what the layout cannot vouch
for gets a new one, checked afresh: a layer moved by set_; a dst that
autograd follows goes through the operation in grad mode and under
no_grad alike; a mapping of another dtype is refused. Skips without a
GPU."""
import pytest

torch = pytest.importorskip("torch")
import p2pt  # noqa: E402
import p2pt.torch as pt  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="PyTorch sees no CUDA device")

POISON = 0xA5
LAYERS, GPU_BLOCKS, HOST_BLOCKS = 4, 32, 48
BLOCK = (8, 8, 64)  # bf16: 8 KiB a block


@pytest.fixture
def h():
    with p2pt.Handle(transport="auto") as handle:
        yield handle


@pytest.fixture
def general(monkeypatch):
    """The layouts made (each swap of layers not swapped before makes one,
    with every check), in order: on the module whose _layout makes them."""
    made = []
    real = pt._swap_layout._Layout

    class Counted(real):
        def __init__(self, *args):
            made.append(args)
            super().__init__(*args)
    monkeypatch.setattr(pt._swap_layout, "_Layout", Counted)
    return made


def gpu_layers():
    return [torch.randn(GPU_BLOCKS, *BLOCK, device="cuda").to(torch.bfloat16)
            for _ in range(LAYERS)]


def pinned(blocks=HOST_BLOCKS):
    t = torch.empty(LAYERS, blocks, *BLOCK, dtype=torch.bfloat16, pin_memory=True)
    t.view(torch.uint8).fill_(POISON)
    return t


def mapping(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(GPU_BLOCKS, generator=g)[:n],
                        torch.randperm(HOST_BLOCKS, generator=g)[:n]], 1)


def landed(src, dst, m):
    torch.cuda.synchronize()
    return all(torch.equal(d[m[:, 1]].cpu(), s[m[:, 0]].cpu()) for s, d in zip(src, dst))


def test_the_same_layers_again_take_the_short_path_with_every_effect(h, general):
    src, pool = gpu_layers(), pinned()
    dst = list(pool.unbind(0))
    pt.swap_blocks(src, dst, mapping(8, 1), handle=h)
    assert len(general) == 1
    records = []
    for seed in (2, 3):
        m = mapping(8, seed)
        versions = [d._version for d in dst]
        before = pool.clone()
        records.append(pt.swap_blocks(src, dst, m, handle=h))
        held = {s.data_ptr() for s in pt._held(h).pending_storages()}
        assert landed(src, dst, m)
        untouched = torch.ones(HOST_BLOCKS, dtype=torch.bool)
        untouched[m[:, 1]] = False
        assert torch.equal(pool[:, untouched], before[:, untouched])
        assert all(d._version > v for d, v in zip(dst, versions))
        assert pool.data_ptr() in held
    assert len(general) == 1, "a swap of the same layers made its layout again"
    pieces = 8 * LAYERS
    for st in records:
        assert pt.batch_status(st) == p2pt.BatchStatus(pieces, pieces, 0, 0xFFFFFFFF, 0)
    assert records[0].data_ptr() != records[1].data_ptr(), "two calls share a status record"
    # A mapping that is a non-contiguous view, and a lone tensor as one layer.
    m = mapping(8, 4)
    view = torch.stack([m[:, 0], m[:, 1]], 0).t()
    pt.swap_blocks(src, dst, view, handle=h)
    assert landed(src, dst, m)
    pt.swap_blocks(src[0], dst[0], m, handle=h)
    pt.swap_blocks(src[0], dst[0], mapping(8, 5), handle=h)
    assert landed(src[:1], dst[:1], mapping(8, 5))
    assert len(general) == 2
    pt._held(h).drain(wait=True)


def test_a_gpu_mapping_of_the_same_layers_takes_the_short_path_too(h, general):
    """A GPU mapping (one p2pt_block_layout_swap call) of layers swapped
    before finds their layout as a CPU mapping does: every byte lands,
    every dst version goes up, each call has its own status record, and an
    id past the pool is skipped and counted, never written."""
    src, pool = gpu_layers(), pinned()
    dst = list(pool.unbind(0))
    pt.swap_blocks(src, dst, mapping(8, 1).cuda(), handle=h)
    assert len(general) == 1
    records = []
    for seed in (2, 3):
        m = mapping(8, seed)
        versions = [d._version for d in dst]
        records.append(pt.swap_blocks(src, dst, m.cuda(), handle=h))
        assert landed(src, dst, m)
        assert all(d._version > v for d, v in zip(dst, versions))
    assert len(general) == 1, "a GPU mapping of the same layers made their layout again"
    pieces = 8 * LAYERS
    for st in records:
        assert st.is_cuda
        assert pt.batch_status(st)[:3] == (pieces, pieces, 0)
    assert records[0].data_ptr() != records[1].data_ptr(), "two calls share a status record"
    bad = mapping(8, 4)
    bad[3, 1] = HOST_BLOCKS  # one past the pool's last block
    torch.cuda.synchronize()
    before = pool.clone()
    s = pt.batch_status(pt.swap_blocks(src, dst, bad.cuda(), handle=h))
    assert (s.count, s.copied, s.skipped) == (pieces, pieces - LAYERS, LAYERS), s
    assert s.first_bad % 8 == 3, s
    good = torch.cat([bad[:3], bad[4:]])
    assert landed(src, dst, good)
    untouched = torch.ones(HOST_BLOCKS, dtype=torch.bool)
    untouched[good[:, 1]] = False
    assert torch.equal(pool[:, untouched], before[:, untouched]), "a byte outside the mapping"
    assert len(general) == 1


def test_a_layer_moved_by_set_is_checked_afresh_and_written_where_it_is(h, general):
    src = gpu_layers()
    dst = [t.clone().pin_memory() for t in pinned().unbind(0)]  # a storage each
    pt.swap_blocks(src, dst, mapping(8, 1), handle=h)
    left = torch.empty(0, dtype=torch.bfloat16).set_(dst[1].untyped_storage(), 0, dst[1].shape,
                                                      dst[1].stride())
    kept = left.clone()
    other = pinned()
    dst[1].set_(other.untyped_storage(), other[1].storage_offset(), dst[1].shape,
                dst[1].stride())
    m = mapping(8, 2)
    pt.swap_blocks(src, dst, m, handle=h)
    assert len(general) == 2, "the moved layer was not checked again"
    assert landed(src, dst, m)
    assert torch.equal(other[1][m[:, 1]].cpu(), src[1][m[:, 0]].cpu())
    assert torch.equal(left, kept), "the storage the layer left was written"
    # Moved to a narrower pool: ids past it are refused, nothing written.
    small = pinned(blocks=4)
    dst[2].set_(small.untyped_storage(), small[2].storage_offset(), (4, *BLOCK),
                dst[2].stride())
    with pytest.raises(ValueError, match="dst block ids must be in"):
        pt.swap_blocks(src, dst, torch.tensor([[0, 5]]), handle=h)
    torch.cuda.synchronize()
    assert (small.view(torch.uint8) == POISON).all()


def test_a_dst_that_autograd_follows_goes_through_the_operation(h, general):
    """In grad mode a dst that requires grad goes through the operation as
    every swap does (its version goes up, the layout is the one made at the
    first call); under no_grad too."""
    pool = pinned()
    pool.copy_(torch.randn(pool.shape))
    src = list(pool.unbind(0))
    dst = [torch.zeros(GPU_BLOCKS, *BLOCK, dtype=torch.bfloat16, device="cuda")
           for _ in range(LAYERS)]
    m = mapping(8, 1).flip(1)
    pt.swap_blocks(src, dst, m, handle=h)
    pt.swap_blocks(src, dst, m, handle=h)
    assert len(general) == 1
    dst[3].requires_grad_()
    version = dst[3]._version
    pt.swap_blocks(src, dst, m, handle=h)
    assert dst[3]._version > version
    with torch.no_grad():
        pt.swap_blocks(src, dst, m, handle=h)
    assert len(general) == 1
    assert landed(src, [d.detach() for d in dst], m)


def test_a_mapping_the_short_path_cannot_take_gets_the_general_checks(h, general):
    """A bad mapping of layers swapped before is refused by name, their
    layout kept (it serves the next good mapping)."""
    src, pool = gpu_layers(), pinned()
    dst = list(pool.unbind(0))
    pt.swap_blocks(src, dst, mapping(8, 1), handle=h)
    with pytest.raises(ValueError, match="block_mapping must be an int64 tensor of shape"):
        pt.swap_blocks(src, dst, mapping(8, 2).to(torch.int32), handle=h)
    with pytest.raises(ValueError, match="block_mapping must be an int64 tensor of shape"):
        pt.swap_blocks(src, dst, mapping(8, 2)[:, :1], handle=h)
    with pytest.raises(ValueError, match=r"block_mapping\[0, 1\] = 48: dst block ids"):
        pt.swap_blocks(src, dst, torch.tensor([[0, HOST_BLOCKS]]), handle=h)
    m = mapping(8, 3)
    pt.swap_blocks(src, dst, m, handle=h)
    assert landed(src, dst, m)
    assert len(general) == 1


def test_the_layout_lets_its_pinned_storages_go_with_its_tensors(h):
    src, pool = gpu_layers(), pinned()
    dst = list(pool.unbind(0))
    pt.swap_blocks(src, dst, mapping(8, 1), handle=h)
    lay = pt._layout(src, dst)
    assert [s.data_ptr() for s in lay.pinned] == [pool.untyped_storage().data_ptr()]
    del dst
    assert lay.pinned == () and not lay.alive
    torch.cuda.synchronize()
