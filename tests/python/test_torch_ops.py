# SPDX-License-Identifier: Apache-2.0
"""p2pt.torch's operations are registered with torch.library under the
p2pt namespace, with the mutated tensors marked in their schemas (what lets
torch.compile keep them in its graph), and their fake implementations give
the right shapes without a GPU. Skips without PyTorch."""
import pytest

try:
    import torch
except ImportError as e:  # worded as the C tests word a missing resource
    pytest.skip(f"no PyTorch: {e}", allow_module_level=True)
import p2pt.torch as pt  # noqa: E402,F401  (registers the operations)


@pytest.mark.parametrize("op, mutated", [("copy_", "Tensor(a0!) dst"),
                                         ("copy_batch_", "Tensor(a0!)[] dsts"),
                                         ("copy_rows_", "Tensor(a0!) dst"),
                                         ("copy_batch_device_", "Tensor(a0!) descs, "
                                                                "Tensor(a1!) count")])
def test_operations_are_registered_with_their_mutations(op, mutated):
    schema = str(getattr(torch.ops.p2pt, op).default._schema)
    assert schema.startswith(f"p2pt::{op}("), schema
    if mutated:
        assert mutated in schema, schema


def test_compile_keeps_a_device_batch_whose_status_is_not_read(monkeypatch, tmp_path):
    # The batch writes memory its descriptors name by address: with no
    # mutation declared, aot_eager and inductor dropped it as dead code.
    import torch._functorch.config as fc
    import torch._inductor.config as ic
    from p2pt.torch import _ops
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    ran = []
    monkeypatch.setattr(_ops, "_ready", lambda h, device: ran.append(device))
    monkeypatch.setattr(_ops, "_get", lambda hid: None)
    monkeypatch.setattr(_ops, "_device", lambda: 0)

    def step(descs, count):
        torch.ops.p2pt.copy_batch_device_(descs, count, 4, 0)
        return descs + 1

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    # The caches off through torch's own patch of its configs: monkeypatch's
    # undo left enable_autograd_cache missing, failing later compiles.
    with fc.patch(enable_autograd_cache=False), ic.patch(fx_graph_cache=False):
        # CPU records: the body runs, then refuses them (it wants CUDA tensors).
        with pytest.raises(ValueError, match="CUDA tensor"):
            compiled(torch.zeros(4, 3, dtype=torch.int64), torch.tensor([4], dtype=torch.int32))
    assert ran, "the compiled step never ran the batch"


def test_fake_row_copy_returns_the_status_record_shape():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        dst = torch.empty(8, 4)
        st = torch.ops.p2pt.copy_rows_(dst, torch.arange(8), torch.empty(8, 4), None, None, 0)
    assert st.shape == (8,) and st.dtype == torch.int32


class _Closed:
    """A handle whose pointer no live Handle has: an operation that reaches
    p2pt refuses it at run time."""
    pointer = 1


def test_compile_traces_every_operation_without_a_graph_break():
    def step(dst, src, di):
        st = pt.copy_rows_(dst, di, src * 1, None, handle=_Closed())
        pt.copy_(dst, src, handle=_Closed())
        pt.copy_batch_([dst], [src], handle=_Closed())
        return dst.sum() + st.sum()

    compiled = torch.compile(step, fullgraph=True, backend="eager")
    # fullgraph: a graph break would raise torch._dynamo's Unsupported while
    # tracing. Pageable CPU tensors never reach p2pt (torch copies them), so
    # the compiled step runs here and must match the eager one.
    with pytest.warns(UserWarning, match="pageable"):
        pt._warned.clear()
        got, ref = torch.zeros(8, 4), torch.zeros(8, 4)
        src, di = torch.arange(32.0).view(8, 4), torch.arange(8).flip(0)
        assert torch.equal(compiled(got, src, di), step(ref, src, di))
    assert torch.equal(got, ref) and torch.equal(got, src)
    # An operation that does reach p2pt (a CUDA stream) refuses the handle
    # at run time, after the trace.
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="handle of this operation is closed"):
            compiled(torch.zeros(8, 4, device="cuda"), torch.ones(8, 4, device="cuda"),
                     torch.arange(8, device="cuda"))


def _recording_backend():
    """A torch.compile backend that runs each graph as traced, and the list
    it fills: a graph's functions and methods called, as strings."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes
                       if n.op in ("call_function", "call_method")])
        return gm.forward
    return graphs, backend


def test_a_call_given_a_stream_runs_outside_the_compiled_graph(monkeypatch):
    # Dynamo does not enter a stream's context for the operations in it
    # (they ran on the default stream on one H200), while an operation
    # enqueues on the stream current when it runs: given a stream, a call
    # leaves the graph (a graph break) and runs as eagerly; without one it
    # stays in.
    import contextlib
    monkeypatch.setattr(pt, "_stream", lambda stream: contextlib.nullcontext())
    graphs, backend = _recording_backend()

    def step(dst, src, stream):
        pt.copy_(dst, src, stream=stream, handle=_Closed())
        return dst.sum()

    for stream, inside in ((None, True), (object(), False)):
        graphs.clear()
        torch._dynamo.reset()
        dst, src = torch.zeros(8), torch.arange(8.0)
        with pytest.warns(UserWarning, match="pageable"):  # torch copies pageable memory
            pt._warned.clear()
            torch.compile(step, backend=backend)(dst, src, stream)
        assert torch.equal(dst, src), f"stream {stream}: the copy did not run"
        assert any("p2pt.copy_" in t for g in graphs for t in g) == inside, (stream, graphs)


def test_a_device_batch_runs_between_compiled_graphs(monkeypatch):
    # Its records name memory by address, which a graph cannot see: with a
    # stand-in operation of the same declaration, inductor computed a read
    # of such memory made before the operation from after it (the same
    # sum before and after, taken once). So the batch leaves the graph and
    # the reads on either side of it fall in different graphs.
    graphs, backend = _recording_backend()

    def step(descs, count, dst):
        before = dst.sum()
        pt.copy_batch_device_(descs, count, handle=_Closed())
        return before, dst.sum()

    torch._dynamo.reset()
    with pytest.raises(ValueError, match="handle of this operation is closed"):  # eagerly
        torch.compile(step, backend=backend)(torch.zeros(4, 3, dtype=torch.int64),
                                             torch.tensor([4], dtype=torch.int32),
                                             torch.zeros(8))
    assert not any("copy_batch_device_" in t for g in graphs for t in g), graphs
    assert any("sum" in t for g in graphs for t in g), f"the read before was not compiled: {graphs}"
    # Where a graph break is an error, torch says why (its disable's reason).
    import inspect
    says = "copy_batch_device_ writes memory that its records name by address" \
        if "reason" in inspect.signature(torch.compiler.disable).parameters else ""
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match=says):
        torch.compile(step, backend="eager", fullgraph=True)(
            torch.zeros(4, 3, dtype=torch.int64), torch.tensor([4], dtype=torch.int32),
            torch.zeros(8))


def test_row_descriptors_are_addresses_of_the_chosen_rows():
    dst, src = torch.zeros(10, 3, dtype=torch.float32), torch.zeros(6, 3, dtype=torch.float32)
    d = pt.row_descriptors(dst, torch.tensor([9, 0, -1]), src, torch.tensor([5, 2, 1]))
    rb = 12
    assert d.tolist() == [[dst.data_ptr() + 9 * rb, src.data_ptr() + 5 * rb, rb],
                          [dst.data_ptr(), src.data_ptr() + 2 * rb, rb],
                          # -1 does not wrap: NULL addresses, which a batch skips
                          [0, 0, rb]]
    d = pt.row_descriptors(dst, None, src, torch.tensor([3, 4, 6]))
    assert d[:, 0].tolist() == [dst.data_ptr(), dst.data_ptr() + rb, 0], "src row 6 is past the end"


@pytest.mark.parametrize("index", [torch.tensor([False, True, False, True]),
                                   torch.tensor([0.0, 1.5, 2.0, 3.0])])
def test_a_mask_or_float_index_is_refused_not_read_as_rows(index):
    # A bool mask read as rows would copy rows 0 and 1; floats would truncate.
    dst, src = torch.zeros(4, 2), torch.arange(8.0).view(4, 2)
    with pytest.raises(ValueError, match="integer row numbers"):
        pt.copy_rows_(dst, index, src, index)
    assert torch.equal(dst, torch.zeros(4, 2)), "nothing written"


def test_row_descriptors_refuse_rows_of_different_sizes():
    with pytest.raises(ValueError, match="12 bytes, src rows 16"):
        pt.row_descriptors(torch.zeros(4, 3), torch.arange(2), torch.zeros(4, 4))


def test_row_descriptors_of_narrow_indices_are_full_addresses():
    # int32 (or narrower) indices must not pull the address sums down to
    # their width: a CPU tensor's address is far above 2**31 too.
    dst, src = torch.zeros(10, 3, dtype=torch.float32), torch.zeros(6, 3, dtype=torch.float32)
    di, si = torch.tensor([9, 0, -1, 4]), torch.tensor([5, 2, 1, 6])
    wide = pt.row_descriptors(dst, di, src, si)
    for dtype in (torch.int32, torch.int16):
        d = pt.row_descriptors(dst, di.to(dtype), src, si.to(dtype))
        assert d.dtype == torch.int64 and d.tolist() == wide.tolist(), dtype


def test_row_descriptors_give_null_addresses_far_outside_and_for_empty_tensors():
    dst, src = torch.zeros(4, 2, dtype=torch.float64), torch.zeros(4, 2, dtype=torch.float64)
    far = torch.tensor([2**40, -2**40, -(2**62), 3])
    d = pt.row_descriptors(dst, far, src, far.flip(0))
    assert d[:, :2].tolist() == [[0, 0], [0, 0], [0, 0], [0, 0]], "each row has one side outside"
    d = pt.row_descriptors(dst, torch.tensor([1, 3]), src, torch.tensor([3, 3]))
    assert d.tolist() == [[dst.data_ptr() + 16, src.data_ptr() + 48, 16],
                          [dst.data_ptr() + 48, src.data_ptr() + 48, 16]]
    empty = torch.zeros(0, 2, dtype=torch.float64)
    for a, b in ((empty, src), (dst, empty)):
        d = pt.row_descriptors(a, torch.tensor([0, 1]), b, torch.tensor([0, 1]))
        assert d.tolist() == [[0, 0, 16], [0, 0, 16]], "no row exists on one side"
