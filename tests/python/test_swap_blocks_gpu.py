# SPDX-License-Identifier: Apache-2.0
"""p2pt.torch on a GPU with pinned host memory: swap_blocks offloads KV
blocks to a pinned pool and restores them byte for byte, with a CPU
mapping (one host batch) and a GPU mapping (one device batch), GPU to GPU
too, and nothing outside the mapped destination blocks changes; a padded
block travels whole; an id out of range on the GPU is skipped, counted and
raised by check=True, never written, even inside the same storage; a
captured graph follows five new mappings; torch.compile keeps the swap in
one graph with the eager bytes, and swaps views that start inside their
storage at a graph break (never a crash); opcheck passes on every operation in both
directions; copy_, copy_batch_ and copy_rows_ take pinned tensors on
either side, and a pageable one with a warning. Skips without a GPU (a
Hopper GPU for device batches, which run as a kernel)."""
import ctypes
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
import p2pt  # noqa: E402
import p2pt.torch as pt  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="PyTorch sees no CUDA device")

POISON = 0xA5
KV = 6            # cache entries: K and V of 3 layers, separate tensors
GPU_BLOCKS = 64
HOST_BLOCKS = 96
BLOCK = (16, 8, 64)  # bf16: 16 KiB a block
UINT32_MAX = 0xFFFFFFFF


def hopper():
    if torch.cuda.get_device_capability(0) < (9, 0):
        pytest.skip("device batches run as a TMA kernel: compute capability 9.0 or later")


@pytest.fixture
def h():
    with p2pt.Handle(transport="auto") as handle:
        yield handle


@pytest.fixture(autouse=True)
def fresh_warnings():
    pt._warned.clear()


def gpu_cache(blocks=GPU_BLOCKS, poison=False):
    """[KV, blocks, *BLOCK] bf16 on the GPU: random, or every byte POISON."""
    t = torch.empty(KV, blocks, *BLOCK, dtype=torch.bfloat16, device="cuda")
    if poison:
        t.view(torch.uint8).fill_(POISON)
    else:
        t.copy_(torch.randn(KV, blocks, *BLOCK, device="cuda"))
    return t


def host_pool(blocks=HOST_BLOCKS, poison=True):
    """The same in pinned host memory."""
    t = torch.empty(KV, blocks, *BLOCK, dtype=torch.bfloat16, pin_memory=True)
    if poison:
        t.view(torch.uint8).fill_(POISON)
    else:
        t.copy_(torch.randn(KV, blocks, *BLOCK))
    assert t.is_pinned()
    return t


def layers(t):
    """One tensor per cache entry (views sharing t's storage), as vLLM holds them."""
    return list(t.unbind(0))


def as_bytes(t):
    """A copy of a [KV, blocks, ...] tensor as [KV, blocks, block bytes]
    uint8 on the CPU (a copy even of a CPU tensor, so that it stays as it
    was)."""
    return t.cpu().clone().view(torch.uint8).reshape(t.shape[0], t.shape[1], -1)


def random_mapping(n, src_blocks, dst_blocks, seed, device="cpu"):
    """n (src, dst) rows: distinct destinations, distinct sources."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randperm(src_blocks, generator=g)[:n]
    d = torch.randperm(dst_blocks, generator=g)[:n]
    return torch.stack([s, d], 1).to(device)


def expect(dst, src, mapping, before):
    """dst's mapped blocks hold src's bytes; every other byte of dst is
    as `before` (as_bytes of dst before the swap)."""
    m = mapping.cpu()
    want = before.clone()
    want[:, m[:, 1]] = as_bytes(src)[:, m[:, 0]]
    assert torch.equal(as_bytes(dst), want)


def swap_and_check(src, dst, mapping, h):
    before = as_bytes(dst)
    st = pt.swap_blocks(layers(src), layers(dst), mapping, handle=h)
    torch.cuda.synchronize()
    expect(dst, src, mapping, before)
    pieces = mapping.shape[0] * KV
    assert pt.batch_status(st) == p2pt.BatchStatus(pieces, pieces, 0, UINT32_MAX, 0)
    assert st.device == mapping.device
    return st


@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_offload_then_restore_every_byte(h, where):
    if where == "cuda":
        hopper()
    gpu, pool = gpu_cache(), host_pool()
    out = random_mapping(40, GPU_BLOCKS, HOST_BLOCKS, seed=1, device=where)
    swap_and_check(gpu, pool, out, h)  # device to host
    back = gpu_cache(poison=True)
    restore = torch.stack([out[:, 1], out[:, 0].flip(0)], 1)  # other GPU slots
    swap_and_check(pool, back, restore, h)  # host to device
    assert torch.equal(as_bytes(back)[:, restore[:, 1].cpu()],
                       as_bytes(gpu)[:, out[:, 0].cpu()])


def test_a_cpu_mapping_is_one_batch_built_in_c(h):
    """The C library takes the ids as they are: one batch of KV x n
    pieces, also from a mapping that is a non-contiguous view, and
    explain_blocks_at of the same layers names the engine that ran it."""
    gpu, pool = gpu_cache(), host_pool()
    m = random_mapping(33, GPU_BLOCKS, HOST_BLOCKS, seed=5)
    view = torch.stack([m[:, 0], m[:, 1]], 0).t()  # the same rows, strides (1, n)
    assert not view.is_contiguous()
    before = h.properties()
    swap_and_check(gpu, pool, view, h)
    after = h.properties()
    assert after["batches"] - before["batches"] == 1
    assert after["batch_pieces"] - before["batch_pieces"] == KV * 33
    recs = p2pt.layers_array([(d.data_ptr(), s.data_ptr(), s.stride(0) * s.element_size(),
                               d.shape[0], s.shape[0])
                              for s, d in zip(layers(gpu), layers(pool))])
    ids = m.contiguous()
    choice = h.explain_blocks_at(ctypes.addressof(recs), KV, ids.data_ptr(), 33,
                                 torch.cuda.current_stream().cuda_stream)
    assert choice.path == "batch" and choice.transport in ("ce", "tma")
    with pytest.raises(p2pt.Error, match=r"mapping row 0: src block 64, but layer 0 has 64"):
        bad = torch.tensor([[GPU_BLOCKS, 0]])
        h.copy_blocks_at(ctypes.addressof(recs), KV, bad.data_ptr(), 1)


def test_a_refusal_in_c_is_explained_by_the_row_at_fault(h):
    """The C library refuses a repeated destination; the swap raises the
    ValueError that names the rows, and no byte of dst changed."""
    gpu, pool = gpu_cache(), host_pool()
    m = random_mapping(40, GPU_BLOCKS, HOST_BLOCKS, seed=11)
    m[7, 1] = m[3, 1]
    before = as_bytes(pool)
    with pytest.raises(ValueError, match="each destination block may appear once"):
        pt.swap_blocks(layers(gpu), layers(pool), m, handle=h)
    torch.cuda.synchronize()
    assert torch.equal(as_bytes(pool), before)


def test_new_layers_at_the_ids_of_freed_ones_are_checked_afresh(h):
    """A swap finds the checks of its layers by their tensors' ids: layers
    freed and made again as narrower views (which may get the same ids)
    must not find the old checks: a block id past the new views is refused."""
    gpu, pool = gpu_cache(), host_pool()
    m = torch.tensor([[0, HOST_BLOCKS - 1]])
    for _ in range(3):
        src, dst = layers(gpu), layers(pool)
        pt.swap_blocks(src, dst, m, handle=h)
        del src, dst
        src, dst = layers(gpu), [t[:HOST_BLOCKS // 2] for t in pool.unbind(0)]
        with pytest.raises(ValueError, match="dst block ids must be in"):
            pt.swap_blocks(src, dst, m, handle=h)
        del src, dst
    torch.cuda.synchronize()


@pytest.mark.parametrize("where", ["cpu", "cuda"])
@pytest.mark.parametrize("offload", [True, False])
def test_a_pinned_pool_freed_at_once_is_not_reused_before_the_swap_ran(h, where, offload):
    """torch's cache of pinned memory hands a freed block to the next
    pin_memory allocation of its size, whose bytes the CPU then writes:
    swap_blocks holds the pool until the stream has passed the swap. The
    stream is held back by a sleep kernel, so the swap is still queued when
    the pool is freed and a new one of the same size is made and written."""
    if where == "cuda":
        hopper()
    gpu = gpu_cache()
    pool = host_pool(poison=False)
    mapping = random_mapping(32, GPU_BLOCKS, HOST_BLOCKS, seed=11, device=where)
    if not offload:
        mapping = mapping.flip(1)
    pt.swap_blocks(layers(gpu if offload else pool), layers(pool if offload else gpu),
                   mapping, handle=h)  # layouts and windows ready: the timed one only enqueues
    torch.cuda.synchronize()
    want = as_bytes(pool)
    torch.cuda._sleep(200_000_000)  # ~0.1 s before the stream reaches the swap
    pt.swap_blocks(layers(gpu if offload else pool), layers(pool if offload else gpu),
                   mapping, handle=h)
    old = pool.data_ptr()
    held = {s.data_ptr() for s in pt._held(h).pending_storages()}
    assert old in held
    nbytes = pool.numel() * pool.element_size()
    del pool
    fresh = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    assert fresh.data_ptr() != old, "the swap's pinned pool was handed out while queued"
    fresh.fill_(0x5A)  # what the CPU writes into a new tensor at once
    torch.cuda.synchronize()
    assert bool((fresh == 0x5A).all()), "the swap wrote into a new tensor's memory"
    if not offload:  # the restore read the old pool's bytes, not the new tensor's
        m = mapping.cpu()
        assert torch.equal(as_bytes(gpu)[:, m[:, 1]], want[:, m[:, 0]])
    pt._held(h).drain(wait=True)
    assert pt._held(h).pending_storages() == [], \
        "a storage is held after the stream passed its swap"


@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_gpu_to_gpu_on_one_device(h, where):
    if where == "cuda":
        hopper()
    swap_and_check(gpu_cache(), gpu_cache(48, poison=True),
                   random_mapping(30, GPU_BLOCKS, 48, seed=2, device=where), h)


def test_one_stacked_tensor_is_one_layer(h):
    src = torch.randn(GPU_BLOCKS, 2, *BLOCK, device="cuda").to(torch.bfloat16)
    dst = torch.empty(HOST_BLOCKS, 2, *BLOCK, dtype=torch.bfloat16, pin_memory=True)
    dst.view(torch.uint8).fill_(POISON)
    m = random_mapping(20, GPU_BLOCKS, HOST_BLOCKS, seed=3)
    before = as_bytes(dst[None])
    pt.swap_blocks(src, dst, m, handle=h)
    torch.cuda.synchronize()
    expect(dst[None], src[None], m, before)


def test_a_padded_block_travels_whole(h):
    src_base = torch.randn(GPU_BLOCKS, 20, 64, device="cuda").to(torch.bfloat16)
    dst_base = torch.empty(HOST_BLOCKS, 20, 64, dtype=torch.bfloat16, pin_memory=True)
    dst_base.view(torch.uint8).fill_(POISON)
    m = random_mapping(10, GPU_BLOCKS, HOST_BLOCKS, seed=4)
    before = as_bytes(dst_base[None])
    pt.swap_blocks(src_base[:, :16], dst_base[:, :16], m, handle=h)  # stride(0): 20 rows
    torch.cuda.synchronize()
    expect(dst_base[None], src_base[None], m, before)


def test_gpu_ids_out_of_range_are_skipped_counted_and_never_written(h):
    hopper()
    gpu, pool = gpu_cache(), host_pool()
    view = pool[:, :48]  # dst block 50 lies in the storage (and its window), not in the view
    m = torch.tensor([[0, 1], [GPU_BLOCKS + 5, 2], [3, 50], [-1, 4], [5, 6]], device="cuda")
    before = as_bytes(pool)
    st = pt.swap_blocks(layers(gpu), layers(view), m, handle=h)
    torch.cuda.synchronize()
    s = pt.batch_status(st)
    assert (s.count, s.copied, s.skipped, s.first_bad) == (5 * KV, 2 * KV, 3 * KV, 1)
    assert s.reasons & p2pt.BATCH_SKIPPED_WINDOW
    expect(pool, gpu, torch.tensor([[0, 1], [5, 6]]), before)
    with pytest.raises(p2pt.Error,
                       match=r"swap_blocks.*row 1 of layer 0.*18 of 30 pieces were skipped"):
        pt.swap_blocks(layers(gpu), layers(view), m, handle=h, check=True)
    with pytest.raises(p2pt.Error) as e:
        pt.check_status(st)
    assert e.value.status == p2pt.Status.INVALID_ARGUMENT


def test_cpu_ids_out_of_range_are_refused_before_any_write(h):
    gpu, pool = gpu_cache(), host_pool()
    before = as_bytes(pool)
    with pytest.raises(ValueError, match=r"block_mapping\[1, 1\] = 96: dst block ids"):
        pt.swap_blocks(layers(gpu), layers(pool), torch.tensor([[0, 1], [2, HOST_BLOCKS]]),
                       handle=h)
    torch.cuda.synchronize()
    assert torch.equal(as_bytes(pool), before)


def test_pinned_swaps_refuse_races_before_any_write(h):
    gpu, pool = gpu_cache(), host_pool()
    src, dst = layers(gpu), layers(pool)
    pt.swap_blocks(src, dst, random_mapping(8, GPU_BLOCKS, HOST_BLOCKS, seed=9), handle=h)
    torch.cuda.synchronize()
    before = as_bytes(pool)
    with pytest.raises(ValueError, match="each destination block may appear once"):
        pt.swap_blocks(src, dst, torch.tensor([[0, 1], [2, 3], [4, 1]]), handle=h)
    one = gpu_cache()
    with pytest.raises(ValueError, match="both a source and a destination"):
        pt.swap_blocks(layers(one), layers(one), torch.tensor([[1, 2], [2, 3]]), handle=h)
    pair = torch.empty(HOST_BLOCKS, 2, *BLOCK, dtype=torch.bfloat16, pin_memory=True)
    two = torch.randn(GPU_BLOCKS, 2, *BLOCK, device="cuda").to(torch.bfloat16)
    with pytest.raises(ValueError, match="pieces write the same bytes"):
        pt.swap_blocks([two[:-1, 0], two[:-1, 1]], [pair[:-1, 0], pair[:-1, 1]],
                       torch.tensor([[0, 1]]), handle=h)
    torch.cuda.synchronize()
    assert torch.equal(as_bytes(pool), before)


@pytest.mark.parametrize("direction", ["offload", "restore"])
def test_a_captured_swap_follows_five_new_mappings(h, direction):
    hopper()
    if direction == "offload":
        src, dst = gpu_cache(), host_pool()
    else:
        src, dst = host_pool(poison=False), gpu_cache(poison=True)
    n = 32
    mapping = random_mapping(n, src.shape[1], dst.shape[1], seed=10, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up: prepares the kernel, registers the windows
        pt.swap_blocks(layers(src), layers(dst), mapping, handle=h)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        st = pt.swap_blocks(layers(src), layers(dst), mapping, handle=h)
    for replay in range(5):
        torch.cuda.synchronize()
        dst.view(torch.uint8).fill_(POISON)
        torch.cuda.synchronize()
        before = as_bytes(dst)
        new = random_mapping(n, src.shape[1], dst.shape[1], seed=20 + replay)
        mapping.copy_(new)
        g.replay()
        torch.cuda.synchronize()
        expect(dst, src, new, before)
        assert pt.batch_status(st) == p2pt.BatchStatus(n * KV, n * KV, 0, UINT32_MAX, 0), \
            f"replay {replay}"


def own_tensors(pool):
    """The layers of `pool` as pinned tensors of their own (each starts its
    storage), as vLLM allocates them."""
    out = []
    for layer in pool.unbind(0):
        t = torch.empty(layer.shape, dtype=layer.dtype, pin_memory=True)
        t.copy_(layer)
        out.append(t)
    return out


@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_compile_keeps_the_swap_in_one_graph_with_the_eager_bytes(h, where):
    if where == "cuda":
        hopper()
    gpu = gpu_cache()
    m = random_mapping(24, GPU_BLOCKS, HOST_BLOCKS, seed=5, device=where)

    def step(src, dst, mapping):
        return pt.swap_blocks(src, dst, mapping, handle=h)

    warm = own_tensors(host_pool())
    pt.swap_blocks(layers(gpu), warm, m, handle=h)  # prepare, windows
    torch.cuda.synchronize()
    scratch = own_tensors(host_pool())
    explain = torch._dynamo.explain(step)(layers(gpu), scratch, m)
    torch.cuda.synchronize()  # the pinned pool may be reused once freed
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    eager, compiled = own_tensors(host_pool()), own_tensors(host_pool())
    before = as_bytes(torch.stack(eager))
    st_e = step(layers(gpu), eager, m)
    st_c = torch.compile(step, fullgraph=True)(layers(gpu), compiled, m)
    torch.cuda.synchronize()
    expect(torch.stack(eager), gpu, m, before)
    assert all(torch.equal(c.view(torch.uint8), e.view(torch.uint8))
               for c, e in zip(compiled, eager))
    assert torch.equal(st_c.cpu(), st_e.cpu())


@pytest.mark.parametrize("direction", ["offload", "restore"])
def test_compiled_views_inside_a_storage_swap_at_a_graph_break_with_the_eager_bytes(h, direction):
    # Inductor copies a mutated view that starts inside its storage back
    # through a copy read from the view's first byte, past the storage's
    # end: this crashed the process before the swap of such views left the
    # graph.
    gpu, pool = gpu_cache(), host_pool(poison=False)
    src, dst_eager, dst_compiled = (gpu, host_pool(), host_pool()) if direction == "offload" \
        else (pool, gpu_cache(poison=True), gpu_cache(poison=True))
    m = random_mapping(24, src.shape[1], dst_eager.shape[1], seed=8)

    def step(s, d, mapping):
        return pt.swap_blocks(s, d, mapping, handle=h)

    before = as_bytes(dst_eager)
    st_e = step(layers(src), layers(dst_eager), m)
    with pytest.warns(UserWarning, match="run outside the compiled graph"):
        st_c = torch.compile(step)(layers(src), layers(dst_compiled), m)
    torch.cuda.synchronize()
    expect(dst_eager, src, m, before)
    assert torch.equal(as_bytes(dst_compiled), as_bytes(dst_eager))
    assert torch.equal(st_c.cpu(), st_e.cpu())
    torch._dynamo.reset()  # else fullgraph=True reuses the translation made just above
    with pytest.raises(Exception, match="(?i)unsupported|graph break"):
        torch.compile(step, fullgraph=True)(layers(src), layers(dst_compiled), m)


@pytest.mark.parametrize("direction", ["offload", "restore"])
@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_opcheck_swap_blocks(h, direction, where):
    if where == "cuda":
        hopper()
    gpu, pool = gpu_cache(), host_pool(poison=False)
    src, dst = (gpu, pool) if direction == "offload" else (pool, gpu)
    m = random_mapping(8, src.shape[1], dst.shape[1], seed=6, device=where)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # opcheck's clones of pinned tensors are pageable
        torch.library.opcheck(torch.ops.p2pt.swap_blocks.default,
                              (layers(src), layers(dst), m, h.pointer))


@pytest.mark.parametrize("direction", ["offload", "restore"])
def test_opcheck_copies_with_a_pinned_side(h, direction):
    g = torch.randn(64, 256, device="cuda")
    c = torch.randn(64, 256).pin_memory()
    dst, src = (c, g) if direction == "offload" else (g, c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.library.opcheck(torch.ops.p2pt.copy_.default, (dst, src, h.pointer))
        torch.library.opcheck(torch.ops.p2pt.copy_batch_.default, ([dst], [src], h.pointer))
        if torch.cuda.get_device_capability(0) >= (9, 0):
            torch.library.opcheck(torch.ops.p2pt.copy_rows_.default,
                                  (dst, torch.randperm(64, device="cuda"), src, None, None,
                                   h.pointer))


@pytest.mark.parametrize("direction", ["offload", "restore"])
def test_copy_and_batch_with_pinned_tensors(h, direction):
    g = torch.randn(300, 777, device="cuda")
    c = torch.empty(300, 777, pin_memory=True)
    if direction == "restore":
        c.copy_(torch.randn(300, 777))
        g.zero_()
    dst, src = (c, g) if direction == "offload" else (g, c)
    pt.copy_(dst, src, handle=h)
    torch.cuda.synchronize()
    assert torch.equal(dst.cpu(), src.cpu())
    small_g = [torch.randn(n, 33, device="cuda") for n in (1, 7, 64)]
    small_c = [torch.zeros(n, 33).pin_memory() for n in (1, 7, 64)]
    pt.copy_batch_(small_c, small_g, handle=h)
    torch.cuda.synchronize()
    assert all(torch.equal(a, b.cpu()) for a, b in zip(small_c, small_g))


def test_a_pageable_tensor_is_copied_by_torch_with_one_warning(h):
    src = torch.randn(64, 128, device="cuda")
    dst = torch.zeros(64, 128)
    with pytest.warns(UserWarning, match=r"copy_: dst is a pageable CPU tensor.*pin_memory\(\)"):
        pt.copy_(dst, src, handle=h)
    assert torch.equal(dst, src.cpu())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second call does not warn again
        pt.copy_(dst, src * 2, handle=h)
    assert torch.equal(dst, (src * 2).cpu())


def test_rows_to_and_from_pinned_memory(h):
    hopper()
    src = torch.randn(256, 512, device="cuda").to(torch.bfloat16)
    host = torch.empty(300, 512, dtype=torch.bfloat16, pin_memory=True)
    host.view(torch.uint8).fill_(POISON)
    ref = host.clone()
    di = torch.randperm(300, device="cuda")[:256]
    st = pt.copy_rows_(host, di, src, handle=h)
    torch.cuda.synchronize()
    ref[di.cpu()] = src.cpu()
    assert torch.equal(host.view(torch.uint8), ref.view(torch.uint8))
    assert pt.check_status(st).copied == 256
    back = torch.zeros(256, 512, dtype=torch.bfloat16, device="cuda")
    pt.copy_rows_(back, None, host, di, handle=h)
    torch.cuda.synchronize()
    assert torch.equal(back.view(torch.uint8), src.view(torch.uint8))


def test_sm_budget_swaps_through_a_handle_of_that_budget():
    try:
        p2pt.Handle(options={"P2P_TRANSPORT_SM_BUDGET": 0}).close()
    except p2pt.Error as e:
        if "not a p2pt setting" in e.text:
            pytest.skip("this libp2pt does not read P2P_TRANSPORT_SM_BUDGET yet")
        raise
    gpu = gpu_cache()
    for budget in (0, 8):
        pool = host_pool()
        before = as_bytes(pool)
        m = random_mapping(16, GPU_BLOCKS, HOST_BLOCKS, seed=budget)
        pt.swap_blocks(layers(gpu), layers(pool), m, sm_budget=budget)
        torch.cuda.synchronize()
        expect(pool, gpu, m, before)
    assert pt.handle(sm_budget=8) is pt.handle(sm_budget=8)
    assert pt.handle(sm_budget=8) is not pt.handle(sm_budget=0)


# The `link` lines of the C library's built-in tables for the H100 and the
# H200 (src/route/auto_defaults.c): CTAs that fill the host link each way.
BUILT_IN_LINK_CTAS = {"d2h": 3, "h2d": 8}


@pytest.mark.parametrize("direction", ["d2h", "h2d"])
def test_a_gpu_mapping_across_the_host_link_takes_link_ctas_without_a_budget(h, direction):
    """No budget: the device batch of a GPU mapping between GPU memory and
    pinned host memory takes the C library's link CTAs for its direction
    (the widest grid of the handle stays within them), one device batch;
    GPU to GPU takes a wider grid."""
    hopper()
    name = torch.cuda.get_device_name(0)
    if "H100" not in name and "H200" not in name:
        pytest.skip(f"the built-in link lines are the H100's and the H200's, not a {name}'s")
    if os.environ.get("P2P_TRANSPORT_AUTO_TABLE") or h.properties()["sm_budget"] >= 0:
        pytest.skip("P2P_TRANSPORT_AUTO_TABLE or P2P_TRANSPORT_SM_BUDGET set the CTAs")
    gpu, pool = gpu_cache(), host_pool(poison=direction == "d2h")
    src, dst = (gpu, pool) if direction == "d2h" else (pool, gpu_cache(poison=True))
    before, batches = as_bytes(dst), h.properties()["device_batches"]
    m = random_mapping(24, src.shape[1], dst.shape[1], seed=21, device="cuda")
    pt.swap_blocks(layers(src), layers(dst), m, handle=h)
    torch.cuda.synchronize()
    expect(dst, src, m, before)
    p = h.properties()
    assert p["device_batches"] == batches + 1
    assert 0 < p["max_grid"] <= BUILT_IN_LINK_CTAS[direction]
    with p2pt.Handle(transport="auto") as wide:
        other = gpu_cache(48, poison=True)
        pt.swap_blocks(layers(gpu), layers(other),
                       random_mapping(8, GPU_BLOCKS, 48, seed=22, device="cuda"), handle=wide)
        torch.cuda.synchronize()
        assert wide.properties()["max_grid"] > BUILT_IN_LINK_CTAS["h2d"]


def test_a_gpu_mapping_on_another_device_is_refused(h):
    hopper()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    gpu, pool = gpu_cache(), host_pool()
    m = random_mapping(4, GPU_BLOCKS, HOST_BLOCKS, seed=7, device="cuda:1")
    with pytest.raises(ValueError, match="must be on the stream's device"):
        pt.swap_blocks(layers(gpu), layers(pool), m, handle=h)
