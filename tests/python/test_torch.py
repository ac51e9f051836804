# SPDX-License-Identifier: Apache-2.0
"""p2pt.torch on a GPU: copies, batches and row copies match torch byte for
byte on the current stream and on a given one; row copies capture into a
CUDA graph and follow new indices and counts at every replay; a zero-byte
row of a device batch is copied as nothing; torch.compile keeps the
operations in its graph (fullgraph); an index outside the tensor is
skipped and counted, never written; windows go with their tensor and with
the handle. Skips without PyTorch or without a GPU (a Hopper GPU for
row copies, which run as a kernel)."""
import gc

import pytest

try:
    import torch
except ImportError as e:  # worded as the C tests word a missing resource
    pytest.skip(f"no PyTorch: {e}", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: PyTorch sees none", allow_module_level=True)

import p2pt  # noqa: E402
import p2pt.torch as pt  # noqa: E402


def hopper():
    if torch.cuda.get_device_capability(0) < (9, 0):
        pytest.skip("needs sm_90 or newer: row copies run as a TMA kernel")


@pytest.fixture
def h():
    with p2pt.Handle(transport="auto") as handle:
        yield handle


def rows(n, width=1024, dtype=torch.bfloat16, fill=True):
    t = torch.empty(n, width, dtype=dtype, device="cuda")
    if fill:
        t.copy_(torch.randn(n, width, device="cuda"))
    return t


def same(a, b):
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_copy_moves_every_byte_on_the_current_stream(h):
    src, dst = rows(300, 777), rows(300, 777, fill=False)
    pt.copy_(dst, src, handle=h)
    torch.cuda.synchronize()
    assert same(dst, src)
    assert h.properties()["copies"] == 1


def test_copy_on_a_given_stream_is_ordered_on_it(h):
    s = torch.cuda.Stream()
    src, dst = rows(64), rows(64, fill=False)
    s.wait_stream(torch.cuda.current_stream())
    pt.copy_(dst, src, stream=s, handle=h)
    s.synchronize()
    assert same(dst, src)


def test_the_stream_p2pt_enqueues_on_is_the_current_one():
    """p2pt's operations read the current stream's raw handle (no Stream
    object): torch's default stream, a stream made current, each device's
    own, and the capturing stream inside a graph capture."""
    from p2pt.torch._handles import _cur
    side = torch.cuda.Stream()
    assert _cur() == _cur(0) == torch.cuda.current_stream().cuda_stream
    with torch.cuda.stream(side):
        assert _cur() == side.cuda_stream != torch.cuda.default_stream().cuda_stream
        assert _cur(torch.cuda.current_device()) == side.cuda_stream
    for d in range(torch.cuda.device_count()):
        assert _cur(d) == torch.cuda.current_stream(d).cuda_stream
        assert _cur(torch.device("cuda", d)) == torch.cuda.current_stream(d).cuda_stream
    g, seen, x = torch.cuda.CUDAGraph(), [], torch.zeros(4, device="cuda")
    with torch.cuda.graph(g):
        seen.append(_cur())
        capturing = torch.cuda.current_stream().cuda_stream
        x.add_(1)  # a graph with work in it: torch warns of an empty one
    assert seen == [capturing] and capturing != torch.cuda.default_stream().cuda_stream


def test_copy_refuses_different_sizes_naming_both(h):
    with pytest.raises(ValueError, match="same size"):
        pt.copy_(rows(4), rows(5), handle=h)


def test_batch_copies_every_piece(h):
    srcs = [rows(n, 513) for n in (1, 7, 64)]
    dsts = [torch.empty_like(s) for s in srcs]
    pt.copy_batch_(dsts, srcs, handle=h)
    torch.cuda.synchronize()
    assert all(same(d, s) for d, s in zip(dsts, srcs))
    assert h.properties()["batches"] == 1


def test_row_copy_matches_index_copy(h):
    hopper()
    src, dst, ref = rows(512), rows(1024, fill=False), rows(1024, fill=False)
    dst.zero_(), ref.zero_()
    di = torch.randperm(1024, device="cuda")[:400]
    si = torch.randint(0, 512, (400,), device="cuda")
    st = pt.copy_rows_(dst, di, src, si, handle=h)
    ref.index_copy_(0, di, src[si])
    torch.cuda.synchronize()
    assert same(dst, ref)
    s = pt.batch_status(st)
    assert (s.count, s.copied, s.skipped) == (400, 400, 0)


def test_row_copy_skips_indices_outside_the_tensor_and_writes_nothing_there(h):
    hopper()
    big = rows(16, fill=False)
    big.fill_(7)
    dst = big[4:8]  # a view: its window (the storage) covers all of big
    src = rows(4)
    di = torch.tensor([0, 5, -1, 3], device="cuda")
    st = pt.copy_rows_(dst, di, src, handle=h)
    torch.cuda.synchronize()
    s = pt.batch_status(st)
    assert s.copied == 2 and s.skipped == 2 and s.first_bad == 1
    assert s.reasons != 0, "the reasons of the refusals are recorded"
    assert same(dst[0], src[0]) and same(dst[3], src[3])
    assert (big[:4] == 7).all() and (big[8:] == 7).all(), "nothing outside dst was written"


def test_a_captured_row_copy_follows_new_indices_and_counts(h):
    hopper()
    src, dst = rows(256), rows(256, fill=False)
    di = torch.arange(256, device="cuda")
    si = torch.arange(256, device="cuda")
    count = torch.tensor([256], dtype=torch.int32, device="cuda")
    pt.prepare(handle=h)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        pt.copy_rows_(dst, di, src, si, count=count, handle=h)  # warm-up
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        st = pt.copy_rows_(dst, di, src, si, count=count, handle=h)
    for n in (256, 100, 1):
        dst.zero_()
        di.copy_(torch.randperm(256, device="cuda"))
        si.copy_(torch.randint(0, 256, (256,), device="cuda"))
        count.fill_(n)
        g.replay()
        ref = torch.zeros_like(dst)
        ref.index_copy_(0, di[:n], src[si[:n]])
        torch.cuda.synchronize()
        assert same(dst, ref), f"replay with count {n}"
        assert pt.batch_status(st).copied == n


def test_zero_byte_rows_of_a_device_batch_count_as_copied_and_touch_nothing(h):
    # A build that keeps a descriptor for every row and zeroes the bytes of
    # those it drops (examples/moe_dispatch.py) relies on this: no sort, no
    # count of its own, and nothing reported as skipped.
    hopper()
    src, dst = rows(256), rows(256, fill=False)
    dst.zero_()
    pt.register_window(src, handle=h)
    pt.register_window(dst, handle=h)
    di = torch.randperm(256, device="cuda")
    keep = torch.rand(256, device="cuda") < 0.5
    descs = pt.row_descriptors(dst, di, src)
    descs[:, 2] *= keep
    count = torch.tensor([256], dtype=torch.int32, device="cuda")
    st = pt.copy_batch_device_(descs, count, handle=h)
    ref = torch.zeros_like(dst)
    ref.index_copy_(0, di[keep], src[keep])
    torch.cuda.synchronize()
    assert same(dst, ref)
    s = pt.batch_status(st)
    assert (s.count, s.copied, s.skipped) == (256, 256, 0)


def test_compile_keeps_the_operations_in_one_graph(h):
    hopper()
    src, dst = rows(128), rows(128, fill=False)
    dst.zero_()

    def step(dst, src, di):
        pt.copy_rows_(dst, di, src * 1, None, handle=h)  # src * 1: a real op around ours
        return dst.float().sum()

    compiled = torch.compile(step, fullgraph=True)
    di = torch.randperm(128, device="cuda")
    got = compiled(dst, src, di)
    ref = torch.zeros_like(dst)
    ref.index_copy_(0, di, src)
    torch.cuda.synchronize()
    assert same(dst, ref)
    assert torch.allclose(got, ref.float().sum())


def test_a_window_goes_with_its_tensor_and_with_the_handle():
    with p2pt.Handle(transport="auto") as h:
        t = rows(64)
        w = pt.register_window(t, handle=h)
        assert w.registered
        assert pt.register_window(t, handle=h) is w, "a live window is shared"
        del t
        gc.collect()
        assert not w.registered, "the window went with its tensor"
        u = rows(64)
        w2 = pt.register_window(u, handle=h)
    assert not w2.registered, "closing the handle released it"
    del u


def test_a_storage_that_resize_moves_gives_up_its_old_window():
    """resize_ reallocates a storage: registered again, it holds one
    window, at its new address; the old one went (the memory there is the
    caching allocator's again), and a row copy from it is exact."""
    hopper()
    with p2pt.Handle(transport="auto") as h:
        t = rows(64)
        w = pt.register_window(t, handle=h)
        s = t.untyped_storage()
        old = s.data_ptr()
        s.resize_(4 * s.nbytes())  # the same storage object, new memory
        assert s.data_ptr() != old
        u = torch.empty(0, dtype=t.dtype, device="cuda").set_(s).view(-1, 1024)
        u[:64].copy_(torch.randn(64, 1024, device="cuda"))
        w2 = pt.register_window(u, handle=h)
        assert w2.registered and not w.registered, "the old window outlived its memory"
        assert [k for k in h._windows if k[1] == old] == []
        dst = rows(8, fill=False)
        idx = torch.tensor([3, 0, 63, 7, 1, 2, 40, 5], device="cuda")
        pt.copy_rows_(dst, torch.arange(8, device="cuda"), u, idx, handle=h)
        torch.cuda.synchronize()
        assert torch.equal(dst, u[idx])


def test_properties_explain_and_topology_through_the_handle(h):
    src, dst = rows(8), rows(8, fill=False)
    c = h.explain_copy(dst.data_ptr(), src.data_ptr(), src.nbytes,
                       torch.cuda.current_stream().cuda_stream)
    assert c.transport in ("ce", "tma") and c.path == "local" and c.reason
    t = h.topology()
    assert t.device_count == torch.cuda.device_count()
    p = h.properties()
    assert p["transport"] == "auto" and p["auto_table"] is not None
    assert "stream_launches" in p and p["version"] == p2pt.__version__


def test_peer_rows_land_on_the_other_gpu(h):
    hopper()
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 CUDA devices: found {torch.cuda.device_count()}")
    h.peer_enable(0, 1)
    src = rows(64)
    dst = torch.zeros(64, 1024, dtype=torch.bfloat16, device="cuda:1")
    di = torch.randperm(64, device="cuda")
    pt.copy_rows_(dst, di, src, handle=h)
    torch.cuda.synchronize(0)
    ref = torch.zeros_like(dst)
    ref.index_copy_(0, di.to("cuda:1"), src.to("cuda:1"))
    assert same(dst, ref)
