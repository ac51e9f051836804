# SPDX-License-Identifier: Apache-2.0
"""p2pt.torch.swap_blocks on any machine, with pageable CPU tensors (which
torch copies, with a warning): the mapped blocks land byte for byte and
nothing else changes, a padded block is copied whole, every bad input is
refused by name before a byte is written, the operation is registered with
its mutation and passes torch.library.opcheck, torch.compile keeps it in
one graph with the eager result (views that start inside their storage
at a graph break), an eager swap bumps the version of every dst, the same
layers swapped again are checked again and follow a storage that moved,
and sm_budget gets a handle per value.
Skips without PyTorch."""
import warnings

import pytest

torch = pytest.importorskip("torch")
import p2pt  # noqa: E402
import p2pt.torch as pt  # noqa: E402


@pytest.fixture(autouse=True)
def quiet():
    """Each test starts with no pageable warning given yet, and sees none
    unless it asks."""
    pt._warned.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


POISON = 0xA5


def poisoned(*shape, dtype=torch.float32):
    t = torch.empty(*shape, dtype=dtype)
    t.view(torch.uint8).fill_(POISON)
    return t


def raw(t):
    """Every byte of t's storage (a padded view's gaps included)."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())


def blocks(t):
    """A contiguous tensor's blocks as rows of bytes."""
    return t.view(torch.uint8).reshape(t.shape[0], -1)


def expect_blocks(dst, src, mapping, before):
    """The mapped blocks of dst are src's; every other byte is as `before`."""
    want = before.clone()
    for s, d in mapping.tolist():
        want[d] = blocks(src)[s]
    assert torch.equal(blocks(dst), want)


def test_blocks_of_every_layer_land_and_nothing_else_changes():
    src = [torch.randn(10, 4, 8) for _ in range(3)]
    dst = [poisoned(6, 4, 8) for _ in range(3)]
    before = [blocks(d).clone() for d in dst]
    m = torch.tensor([[1, 0], [9, 5], [3, 2]])
    st = pt.swap_blocks(src, dst, m)
    for s, d, b in zip(src, dst, before):
        expect_blocks(d, s, m, b)
    assert pt.batch_status(st) == p2pt.BatchStatus(9, 9, 0, 0xFFFFFFFF, 0)
    assert pt.check_status(st).copied == 9


def test_a_single_tensor_is_one_layer_and_stacked_k_v_move_together():
    src = torch.randn(8, 2, 16, 4)  # [blocks, K/V, tokens, dim]
    dst = poisoned(8, 2, 16, 4)
    m = torch.tensor([[7, 0], [0, 7]])
    pt.swap_blocks(src, dst, m)
    assert torch.equal(dst[0], src[7]) and torch.equal(dst[7], src[0])
    assert (dst[1:7].view(torch.uint8) == POISON).all()


def test_a_padded_block_is_copied_whole():
    sbase, dbase = torch.randn(5, 20), poisoned(5, 20)
    src, dst = sbase[:, :16], dbase[:, :16]  # stride(0) 20: 4 elements of padding a block
    pt.swap_blocks(src, dst, torch.tensor([[4, 1]]))
    assert torch.equal(dbase[1], sbase[4]), "the padding travels with the block"
    assert (dbase[[0, 2, 3, 4]].view(torch.uint8) == POISON).all()


def test_pageable_tensors_warn_once_per_role_naming_pin_memory():
    src, dst = [torch.randn(4, 8)] * 2, [torch.zeros(4, 8), torch.zeros(4, 8)]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        pt.swap_blocks(src, dst, torch.tensor([[0, 1]]))
        pt.swap_blocks(src, dst, torch.tensor([[1, 2]]))
    texts = [str(x.message) for x in w]
    assert len(texts) == 2, texts
    assert "src[0]" in texts[0] and "dst[0]" in texts[1]
    assert all("pin_memory()" in t and "pageable" in t for t in texts)


def test_an_empty_mapping_copies_nothing():
    dst = poisoned(4, 8)
    st = pt.swap_blocks(torch.randn(4, 8), dst, torch.zeros(0, 2, dtype=torch.int64))
    assert pt.batch_status(st) == p2pt.BatchStatus(0, 0, 0, 0xFFFFFFFF, 0)
    assert (dst.view(torch.uint8) == POISON).all()


def refused(exc, match, src, dst, mapping, **kw):
    """swap_blocks raises `exc` matching `match`, and no dst byte changed."""
    dsts = dst if isinstance(dst, list) else [dst]
    before = [raw(d).clone() for d in dsts if isinstance(d, torch.Tensor)]
    with pytest.raises(exc, match=match):
        pt.swap_blocks(src, dst, mapping, **kw)
    for d, b in zip([d for d in dsts if isinstance(d, torch.Tensor)], before):
        assert torch.equal(raw(d), b), "a refused swap wrote nothing"


M = torch.tensor([[0, 1]])


def test_lists_of_different_lengths():
    a = torch.randn(4, 8)
    refused(ValueError, "1 src layers and 2 dst layers", [a], [poisoned(4, 8), poisoned(4, 8)], M)


def test_dtype_shape_or_strides_that_differ():
    a = torch.randn(4, 8)
    refused(ValueError, r"layer 0: src is torch.float32 .* dst is torch.float16",
            a, poisoned(4, 8, dtype=torch.float16), M)
    refused(ValueError, r"layer 0: src .* shape \(4, 8\).* dst .* shape \(4, 9\)",
            a, poisoned(4, 9), M)
    refused(ValueError, r"strides \(8, 1\).*strides \(1, 4\)", a, poisoned(8, 4).t(), M)


def test_a_bad_mapping_tensor():
    a = torch.randn(4, 8)
    refused(ValueError, r"int64 tensor of shape \[n, 2\].*torch.int32", a, poisoned(4, 8),
            M.int())
    refused(ValueError, r"shape \[n, 2\].*\(2,\)", a, poisoned(4, 8), torch.tensor([0, 1]))
    refused(ValueError, r"shape \[n, 2\].*\(1, 3\)", a, poisoned(4, 8), torch.tensor([[0, 1, 2]]))


@pytest.mark.parametrize("row, col, side", [([4, 0], 0, "src"), ([-1, 0], 0, "src"),
                                            ([0, 6], 1, "dst"), ([0, -3], 1, "dst")])
def test_a_block_id_out_of_range_names_row_value_and_limit(row, col, side):
    limit = 4 if side == "src" else 6
    m = torch.tensor([[1, 1], row])
    refused(ValueError, rf"block_mapping\[1, {col}\] = {row[col]}: {side} block ids must be in "
            rf"\[0, {limit}\)", torch.randn(4, 8), poisoned(6, 8), m)


def test_the_smallest_layer_bounds_the_ids():
    src = [torch.randn(8, 4), torch.randn(3, 4)]
    refused(ValueError, r"\[0, 3\) \(src\[1\] has 3 blocks\)", src,
            [poisoned(8, 4), poisoned(8, 4)], torch.tensor([[5, 0]]))


def test_a_destination_written_twice_or_also_read():
    refused(ValueError, "each destination block may appear once", torch.randn(4, 8),
            poisoned(4, 8), torch.tensor([[0, 1], [2, 1]]))
    same = torch.randn(4, 8)
    refused(ValueError, "both a source and a destination", same, same,
            torch.tensor([[0, 1], [1, 2]]))
    # Two views of one storage overlap by address, not by id.
    base = torch.randn(8, 8)
    refused(ValueError, "both a source and a destination", base[:4], base[2:6],
            torch.tensor([[3, 1]]))  # src block 3 is row 3, so is dst block 1


def test_overlapping_blocks_after_expand():
    row = torch.randn(1, 8)
    refused(ValueError, "overlapping blocks: stride\\(0\\) is 0 elements, but a block spans 8",
            row.expand(4, 8), poisoned(1, 8).expand(4, 8), M)


def test_a_padded_block_past_the_storage():
    store = torch.randn(32)
    view = store.as_strided((4, 6), (8, 1), 2)  # the last block's padding ends 8 bytes past
    refused(ValueError, r"src\[0\]: its last block.* ends at byte 136 of a storage of 128",
            view, poisoned(40).as_strided((4, 6), (8, 1)), torch.tensor([[3, 0]]))


def test_not_tensors_and_bad_budgets():
    refused(TypeError, "src must be a tensor or a list of tensors", "x", poisoned(4, 8), M)
    refused(TypeError, "dst must be a tensor or a list", torch.randn(4, 8), [poisoned(4, 8), 3],
            M)
    for bad in (-1, 1.5, True, "8"):
        refused(ValueError, "sm_budget=.*expected None or an int >= 0", torch.randn(4, 8),
                poisoned(4, 8), M, sm_budget=bad)
    refused(ValueError, "handle= or sm_budget=, not both", torch.randn(4, 8), poisoned(4, 8), M,
            sm_budget=2, handle=object())
    refused(ValueError, "0-d", [torch.tensor(1.0)], [torch.tensor(2.0)], M)


def test_registered_with_the_mutated_list_and_opcheck_passes():
    schema = str(torch.ops.p2pt.swap_blocks.default._schema)
    assert schema.startswith("p2pt::swap_blocks(Tensor[] src, Tensor(") and "!)[] dst" in schema
    src = [torch.randn(6, 4, 8) for _ in range(2)]
    dst = [torch.zeros(5, 4, 8) for _ in range(2)]
    torch.library.opcheck(torch.ops.p2pt.swap_blocks.default,
                          (src, dst, torch.tensor([[5, 0], [1, 4]]), 0))


def test_compile_keeps_swap_blocks_in_one_graph_with_the_eager_result():
    def step(src, dst, m):
        st = pt.swap_blocks([s * 2 for s in src], dst, m)
        return dst[0].sum() + st.sum()

    src = [torch.randn(6, 4, 8) for _ in range(2)]
    m = torch.tensor([[5, 0], [1, 4]])
    eager = [poisoned(5, 4, 8) for _ in range(2)]
    ref = step(src, eager, m)
    explain = torch._dynamo.explain(step)(src, [poisoned(5, 4, 8) for _ in range(2)], m)
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    got = [poisoned(5, 4, 8) for _ in range(2)]
    out = torch.compile(step, fullgraph=True, backend="aot_eager")(src, got, m)
    assert torch.equal(out, ref)
    assert all(torch.equal(g.view(torch.uint8), e.view(torch.uint8)) for g, e in zip(got, eager))


def test_compiled_views_inside_a_storage_swap_at_a_graph_break():
    def step(src, dst, m):
        return pt.swap_blocks(src, dst, m)

    graphs = []

    def backend(gm, inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    src = torch.randn(2, 6, 4, 8)
    m = torch.tensor([[5, 0], [1, 4]])
    eager, got = poisoned(2, 5, 4, 8), poisoned(2, 5, 4, 8)
    st = step(list(src.unbind(0)), list(eager.unbind(0)), m)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = torch.compile(step, backend=backend)(list(src.unbind(0)), list(got.unbind(0)), m)
    assert any("run outside the compiled graph" in str(x.message) for x in w)
    assert not any("swap_blocks" in g for g in graphs), graphs
    assert torch.equal(got.view(torch.uint8), eager.view(torch.uint8))
    assert torch.equal(out, st)


def test_an_eager_swap_bumps_the_version_of_every_dst():
    dst = [poisoned(4, 8), poisoned(4, 8)]
    before = [d._version for d in dst]
    pt.swap_blocks([torch.randn(4, 8), torch.randn(4, 8)], dst, M)
    assert all(d._version > v for d, v in zip(dst, before))


def test_plain_eager_swaps_skip_the_dispatcher_and_the_rest_take_it(monkeypatch):
    """Plain tensors in eager mode call the op's body straight (the
    dispatcher's boxing of every layer costs more than the body); a dst
    that autograd follows, or a __torch_function__ mode, goes through
    torch.ops, whose registered body is the module's original one. The
    bytes land either way."""
    body, took = pt._swap_blocks._swap, []

    def counted(*args):
        took.append(args[3])
        return body(*args)
    monkeypatch.setattr(pt._swap_blocks, "_swap", counted)
    src = [torch.randn(4, 8), torch.randn(4, 8)]
    dst = [poisoned(4, 8), poisoned(4, 8)]
    pt.swap_blocks(src, dst, M)
    assert len(took) == 1
    dst[1].requires_grad_()
    pt.swap_blocks(src, dst, torch.tensor([[2, 3]]))
    assert len(took) == 1
    with torch.no_grad():
        pt.swap_blocks(src, dst, torch.tensor([[3, 0]]))
    assert len(took) == 2
    dst[1].requires_grad_(False)

    class Seen(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    with Seen():
        pt.swap_blocks(src, dst, torch.tensor([[0, 2]]))
    assert len(took) == 2
    for s, d in zip(src, dst):
        for a, b in ((0, 1), (2, 3), (3, 0), (0, 2)):
            assert torch.equal(d.detach()[b], s[a])


def test_the_same_layers_again_are_checked_again_and_follow_their_storage():
    src, dst = [torch.randn(4, 8)], [poisoned(4, 8)]
    pt.swap_blocks(src, dst, torch.tensor([[0, 1]]))
    refused(ValueError, r"block_mapping\[0, 1\] = 4: dst block ids", src, dst,
            torch.tensor([[0, 4]]))
    refused(ValueError, "each destination block may appear once", src, dst,
            torch.tensor([[0, 2], [1, 2]]))
    old = torch.empty(0).set_(dst[0].untyped_storage(), 0, (4, 8), (8, 1))
    kept = old.clone()
    dst[0].set_(poisoned(4, 8).untyped_storage(), 0, (4, 8), (8, 1))  # the same tensor, moved
    pt.swap_blocks(src, dst, torch.tensor([[2, 3]]))
    assert torch.equal(dst[0][3], src[0][2])
    assert (dst[0][:3].view(torch.uint8) == POISON).all()
    assert torch.equal(old, kept), "the storage it left is not written"


def test_layers_whose_padded_blocks_interleave_are_refused():
    # Layer l of a [blocks, layers, ...] tensor: stride(0) spans every
    # layer, so the padded blocks of the two layers share bytes.
    # (The last block of each view is padded too: a fifth block keeps it
    # inside the storage.)
    src = torch.randn(5, 2, 8)
    dst = poisoned(5, 2, 8)
    refused(ValueError, "pieces write the same bytes", [src[:4, 0], src[:4, 1]],
            [dst[:4, 0], dst[:4, 1]], torch.tensor([[0, 1]]))


def test_fake_swap_gives_the_status_record_on_the_mappings_device():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        st = torch.ops.p2pt.swap_blocks([torch.empty(4, 8)], [torch.empty(4, 8)],
                                        torch.zeros(3, 2, dtype=torch.int64), 0)
    assert st.shape == (8,) and st.dtype == torch.int32 and st.device.type == "cpu"


class FakeHandle:
    made = []

    def __init__(self, transport=None, options=None):
        self.options = options
        self.pointer = 0x1000 + len(FakeHandle.made)
        FakeHandle.made.append(self)


def test_sm_budget_gets_one_handle_per_value_made_once(monkeypatch):
    monkeypatch.setattr(pt._handle, "Handle", FakeHandle)
    # On the module that reads it: p2pt.torch only re-exports what its
    # modules own, and a name rebound there would not reach _budget_handle.
    monkeypatch.setattr(pt._handles, "_budgets", {})
    monkeypatch.delenv("P2P_TRANSPORT", raising=False)
    a = pt.handle(sm_budget=8)
    assert pt.handle(sm_budget=8) is a
    b = pt.handle(sm_budget=0)
    assert b is not a
    assert a.options == {"P2P_TRANSPORT": "auto", "P2P_TRANSPORT_SM_BUDGET": 8}
    assert b.options["P2P_TRANSPORT_SM_BUDGET"] == 0
    # The operation carries the budget, not a handle made while tracing.
    assert pt._hid(None, 8) == -9 and pt._get(-9) is a and pt._hid(None) == 0


def test_check_status_raises_p2pt_error_naming_the_first_skipped_piece():
    st = torch.tensor([6, 4, 2, 3, p2pt.BATCH_SKIPPED_WINDOW, 0, 0, 0], dtype=torch.int32)
    with pytest.raises(p2pt.Error, match=r"2 of 6 pieces were skipped.*piece 3.*window") as e:
        pt.check_status(st)
    assert e.value.status == p2pt.Status.INVALID_ARGUMENT
    with pytest.raises(p2pt.Error, match=r"row 1 of layer 1"):
        pt._check_swap(st, 2)


def test_each_swap_returns_a_done_record_of_its_own():
    """Every swap's record is the record of a batch that copied every
    piece, in bytes of its own: a record written to does not change the
    next one, and the same layers swapped again (their layout found, not
    made) give a new record each time."""
    src, dst = [torch.randn(4, 8), torch.randn(4, 8)], [poisoned(4, 8), poisoned(4, 8)]
    got = [pt.swap_blocks(src, dst, torch.tensor([[i % 4, (i + 1) % 4]])) for i in range(5)]
    assert all(r.tolist() == [2, 2, 0, -1, 0, 0, 0, 0] for r in got)
    assert len({r.data_ptr() for r in got}) == 5
    got[0].fill_(7)
    assert pt.swap_blocks(src, dst, M).tolist() == [2, 2, 0, -1, 0, 0, 0, 0]
    assert pt.swap_blocks(src[0], dst[0], M).tolist() == [1, 1, 0, -1, 0, 0, 0, 0]


def test_layers_as_a_tuple_and_every_bad_mapping_take_the_same_checks():
    """A tuple of layers swaps as the list does; a mapping of another
    dtype, shape or device is refused by name, the layers' layout made
    before or not."""
    src, dst = [torch.randn(4, 8)], [poisoned(4, 8)]
    pt.swap_blocks(src, dst, M)
    pt.swap_blocks(tuple(src), tuple(dst), torch.tensor([[2, 3]]))
    assert torch.equal(dst[0][1], src[0][0]) and torch.equal(dst[0][3], src[0][2])
    for mapping, match in ((M.to("meta"), "block_mapping is on meta"),
                           (M.to(torch.int32), "int64 tensor of shape"),
                           (M[:, :1], "int64 tensor of shape")):
        for s, d in ((src, dst), (tuple(src), tuple(dst))):
            refused(ValueError, match, s, d, mapping)
    pt._layouts.clear()
    refused(ValueError, "block_mapping is on meta", src, dst, M.to("meta"))
