# SPDX-License-Identifier: Apache-2.0
"""The swap itself (_swap, the body of p2pt::swap_blocks, registered here
once with its fake kernel): a CPU mapping as one p2pt_copy_blocks_async
call, or torch's copies where a side is pageable; a GPU mapping as one
device batch, on the handle of LINK_CTAS where it crosses the host link;
the small caches these read at every call (_done, _done_eager, _batch_max); and
the graph break for dst views that start inside their storage
(_leave_graph)."""
import warnings
from typing import List

import torch

from .._lib import Error, Status
from ._handles import _cur, _device, _get, _ready, handle
from ._host import _host_only, _warned
from ._ops import _UINT32_MAX, _no_pieces, _status
from ._swap_layout import _check_ids, _check_overlaps, _layout, _mapping_check, _swap_check


def _blocks_view(t, bb):
    """`t` as (blocks, bb) bytes over its storage: each row a whole padded
    block, as swap_blocks copies it."""
    raw = torch.empty(0, dtype=torch.uint8, device=t.device)
    raw.set_(t.untyped_storage(), t.storage_offset() * t.element_size(), (t.shape[0], bb),
             (bb, 1))
    return raw


def _swap_by_torch(srcs, dsts, mapping, sizes):
    _host_only(*srcs, *dsts)
    for s, d, bb in zip(srcs, dsts, sizes):
        picked = _blocks_view(s, bb).index_select(0, mapping[:, 0].to(s.device))
        _blocks_view(d, bb).index_copy_(0, mapping[:, 1].to(d.device), picked.to(d.device))


_CPU = torch.device("cpu")
_done_records = {}  # pieces -> the CPU record of a batch that copied them all


def _done(pieces, device):
    """The status record of a host batch that copied every piece (a copy
    of one made once per count: cheaper than building it)."""
    if pieces < 2**31:
        rec = _done_records.get(pieces)
        if rec is None:
            if len(_done_records) >= 256:
                _done_records.clear()
            rec = _done_records[pieces] = torch.tensor([pieces, pieces, 0, -1, 0, 0, 0, 0],
                                                       dtype=torch.int32)
        return rec.clone() if device.type == "cpu" else rec.to(device)
    return _status(pieces, pieces, 0, _UINT32_MAX, 0, device)


def _swap(src, dst, block_mapping, hid, bump=None):
    """swap_blocks itself: the body of p2pt::swap_blocks. `bump`: called
    just before the swap is enqueued (swap_blocks' direct path bumps the
    dst version counters there)."""
    if len(src) != len(dst):
        _swap_check(src, dst)  # raises, naming both lengths
    _mapping_check(block_mapping)
    lay = _layout(src, dst)
    if not lay.slow:
        if block_mapping.is_cuda:
            return _swap_on_gpu(lay, src, dst, block_mapping, hid, bump)
        return _swap_host(lay, src, dst, block_mapping, hid, bump)
    n = block_mapping.shape[0]
    pieces = n * lay.layers
    mapping = block_mapping.cpu()  # a sync where the mapping is on the GPU
    if pieces == 0:
        return _no_pieces(block_mapping.device)
    st = _done(pieces, block_mapping.device)
    if bump is not None:
        bump()
    _host_checks(lay, mapping, n)
    _swap_by_torch(src, dst, mapping, lay.sizes)
    return st


_done_rows = {}  # pieces -> spare rows of a block of done records made at once


def _done_eager(pieces, device=None):
    """_done for a CPU mapping's swap that no dispatcher sees (_again): a
    row of a block of 64 such records made at once, each row handed out
    once (its own bytes; a view of the block), for the cost of a pop."""
    try:
        return _done_rows[pieces].pop()
    except (KeyError, IndexError):
        if len(_done_rows) >= 256:
            _done_rows.clear()
        rows = _done_rows[pieces] = list(_done(pieces, _CPU).repeat(64, 1).unbind(0))
        return rows.pop()


def _swap_host(lay, src, dst, mapping, hid, bump=None, record=_done):
    """A CPU mapping of layers in GPU or pinned memory: one
    p2pt_copy_blocks_async call, in which the C library checks the ids and
    builds the pieces. What it refuses, the checks here explain (a
    ValueError naming the row) where the mapping is at fault. Everything
    else is done before it: right after a launch across the host link,
    host steps are slow."""
    n = mapping.shape[0]
    pieces = n * lay.layers
    if pieces == 0:
        return _no_pieces(_CPU)
    st = record(pieces, _CPU)
    if bump is not None:
        bump()
    if not mapping.is_contiguous():
        mapping = mapping.contiguous()
    h = _get(hid)
    device = _device()
    _ready(h, device)
    stream = _cur(device)
    try:
        h.copy_blocks_at(lay.c_layers_at, lay.layers, mapping.data_ptr(), n, stream)
    except Error as e:
        if e.status == Status.INVALID_ARGUMENT:
            _host_checks(lay, mapping, n)
        raise
    lay.hold_pinned((device, stream))
    return st


def _host_checks(lay, mapping, n):
    """The checks of a CPU mapping, in torch (ValueError naming the first
    bad row): every id in its layers, no block written twice or written
    and read."""
    _check_ids(mapping[:, 0], lay.src_rows, "src", 0)
    _check_ids(mapping[:, 1], lay.dst_rows, "dst", 1)
    _check_overlaps(lay.pieces(mapping), n)


@torch.library.custom_op("p2pt::swap_blocks", mutates_args=("dst",))
def _swap_blocks_op(src: List[torch.Tensor], dst: List[torch.Tensor],
                    block_mapping: torch.Tensor, hid: int) -> torch.Tensor:
    return _swap(src, dst, block_mapping, hid)


# A GPU mapping between GPU memory and pinned host memory is bound by the
# host link, which a few CTAs fill: 8 to the GPU, and to the host 3 (CTA 0
# of a device batch writes its status record, so 2 copy), the CTAs of the
# C library's built-in `link` lines for the H100 and the H200. More move
# nothing faster, and a matmul beside the swap loses the SMs they hold
# (bench/results/offload.md, steps 5, 11 and 18). Where no budget is set,
# such a swap runs on the handle of that budget; the C library cannot
# choose it, as the pieces are read on the GPU. Read here at each such
# swap: p2pt.torch.LINK_CTAS is the same dict.
LINK_CTAS = {"h2d": 8, "d2h": 3}
_budget_of = {}  # handle pointer -> its P2P_TRANSPORT_SM_BUDGET (-1: none)


def _link_hid(hid, lay):
    """The handle for a GPU mapping of `lay`: hid, or where it is the
    default handle without a budget and the swap crosses the host link,
    the handle of LINK_CTAS for its direction."""
    if hid != 0 or not lay.crosses_link:
        return hid
    h = handle()
    budget = _budget_of.get(h.pointer)
    if budget is None:
        budget = _budget_of[h.pointer] = h.properties()["sm_budget"]
    return -1 - LINK_CTAS[lay.link_dir] if budget < 0 else hid


def _swap_on_gpu(lay, src, dst, mapping, hid, bump=None):
    """A GPU mapping: one p2pt_copy_blocks_device_async call, which builds
    the pieces on the stream from the layers (kernel parameters) and the
    mapping (read when it runs, so a graph follows new rows) and runs them
    as one device batch; an id outside its layer is skipped and counted in
    the status record (the workspace's first 32 bytes), never written."""
    h = _get(_link_hid(hid, lay))
    device = _device()
    gpu = torch.device("cuda", device)
    if mapping.device != gpu:
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping is on {mapping.device}, the "
                         f"stream on {gpu}: a GPU mapping must be on the stream's device")
    n, layers = mapping.shape[0], lay.layers
    pieces = n * layers
    if pieces == 0:
        return _no_pieces(gpu)
    _ready(h, device)
    cap = _batch_max(h)
    if pieces > cap:
        raise ValueError(f"p2pt.torch.swap_blocks: {n} blocks x {layers} layers = {pieces} "
                         f"pieces, over the {cap} one device batch takes")
    lay.windows(h, device, src, dst)
    if not mapping.is_contiguous():
        mapping = mapping.contiguous()
    ws = torch.empty(-(-h.blocks_workspace_bytes(layers, n) // 4), dtype=torch.int32,
                     device=gpu)
    if bump is not None:
        bump()
    h.copy_blocks_device_at(lay.c_layers_at, layers, mapping.data_ptr(), n, ws.data_ptr(),
                            _cur(device))
    lay.hold_pinned()
    # The record is the workspace's first 32 bytes: the workspace itself,
    # shrunk in place to them (a tensor of its own, not a view).
    return ws.resize_(8)


_caps = {}


def _batch_max(h):
    cap = _caps.get(h.pointer)
    if cap is None:
        cap = _caps[h.pointer] = h.properties()["device_batch_max"]
    return cap


@_swap_blocks_op.register_fake
def _(src, dst, block_mapping, hid):
    from torch._guards import TracingContext
    if TracingContext.try_get() is not None and any(d.storage_offset() != 0 for d in dst):
        _leave_graph()
    return torch.empty(8, dtype=torch.int32, device=block_mapping.device)


def _leave_graph():
    """Keep a swap whose dst layers start inside their storage (views such
    as pool.unbind(0)) out of a compiled graph: inductor copies such a
    mutated view back through a copy of its storage that it reads from the
    view's first byte instead of the storage's, past the storage's end (a
    crash, or bytes written outside the tensor). torch.compile answers
    this exception of the fake kernel with a graph break, and runs the swap
    eagerly there (fullgraph=True: an error naming the operation)."""
    if "compile" not in _warned:
        _warned.add("compile")
        warnings.warn("p2pt.torch.swap_blocks: dst layers that are views starting inside their "
                      "storage run outside the compiled graph (inductor mishandles such mutated "
                      "views); pass tensors of their own to keep the swap in the graph",
                      stacklevel=2)
    from torch._subclasses.fake_tensor import UnsupportedOperatorException
    raise UnsupportedOperatorException(torch.ops.p2pt.swap_blocks.default)
