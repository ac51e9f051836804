# SPDX-License-Identifier: Apache-2.0
"""p2pt::swap_blocks, registered here with its fake kernel: its body finds
the layers' layout (one dict lookup) and makes one p2pt_block_layout_swap
call, in which the C library checks the mapping and picks the batch and
its CTAs; pageable layers go through torch once the C library has checked
the mapping."""
import warnings

import torch

from .._lib import Error, Status
from ._handles import _cur, _device, _get, _ready
from ._host import _held, _host_only
from ._ops import _no_pieces
from ._swap_layout import _layout, _mapping_check

# torch.library's lower layer rather than custom_op: the schema of a list
# of mutated tensors, whose versions the body bumps in one call where
# custom_op's dispatch bumps them one by one in Python.
_lib = torch.library.Library("p2pt", "FRAGMENT")
_lib.define("swap_blocks(Tensor[] src, Tensor(a0!)[] dst, Tensor block_mapping, int hid) "
            "-> Tensor")
_bump = torch.autograd.graph.increment_version


def _swap(src, dst, block_mapping, hid):
    """The body of p2pt::swap_blocks: the layout of these layers (made and
    checked at their first swap), the versions of dst bumped as autograd
    expects of an in-place write, and the swap."""
    lay, m = _layout(src, dst), block_mapping
    # _mapping_check's test inline: a good mapping pays no call (half the time)
    if m.dtype != torch.int64 or m.dim() != 2 or m.shape[1] != 2 or not (m.is_cpu or m.is_cuda):
        _mapping_check(m)
    if not m.is_cuda and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        # Its rows are read into the batch now: every replay would swap
        # the blocks of this moment, whatever the mapping holds then.
        raise ValueError("p2pt.torch.swap_blocks: a CPU block_mapping in a captured graph "
                         "would swap the blocks it names now at every replay; give the "
                         "mapping on the GPU (the kernel reads it at each replay)")
    _bump(dst)
    if not m.shape[0] or lay.c is None:
        return _no_pieces(m.device)
    if lay.slow:
        return _by_torch(lay, src, dst, m)
    if not m.is_contiguous():
        m = m.contiguous()
    h, device = _get(hid), _device()
    _ready(h, device)
    stream = _cur(device)
    n = m.shape[0]
    if m.is_cuda:
        if m.device.index != device:
            raise ValueError(f"p2pt.torch.swap_blocks: block_mapping is on {m.device}, the "
                             f"stream on cuda:{device}: a GPU mapping must be on the stream's "
                             f"device")
        lay.windows(h, device)
        record = torch.empty(-(-(lay.ws_base + n * lay.ws_row) // 4), dtype=torch.int32,
                             device=m.device)
    else:
        record = torch.empty(8, dtype=torch.int32)
    try:
        h.block_layout_swap(lay.c.pointer, m.data_ptr(), n, int(m.is_cuda), record.data_ptr(),
                            stream)
    except Error as e:
        _refused(e)
    if lay.pinned:
        _held(h).hold(lay.pinned, (device, stream))
    # a GPU mapping's record: the workspace's first 32 bytes, shrunk in place to them
    return record.resize_(8) if m.is_cuda else record


def _refused(e):
    """A refused argument as a ValueError in the C library's words, else `e`."""
    if e.status == Status.INVALID_ARGUMENT:
        raise ValueError(f"p2pt.torch.swap_blocks: {e.text}") from e
    raise e


def _by_torch(lay, src, dst, mapping):
    """Layers in pageable memory, which no stream reaches: the mapping
    checked by the C library as a swap would check it, then torch's
    copies, after the stream's earlier work (a host sync)."""
    m = mapping.to("cpu").contiguous()  # a sync where the mapping is on the GPU
    record = torch.empty(8, dtype=torch.int32)
    try:
        lay.c.check(m.data_ptr(), m.shape[0], record.data_ptr())
    except Error as e:
        _refused(e)
    _host_only(*src, *dst)
    for s, d, bb in zip(src, dst, lay.sizes):
        picked = _blocks_view(s, bb).index_select(0, m[:, 0].to(s.device))
        _blocks_view(d, bb).index_copy_(0, m[:, 1].to(d.device), picked.to(d.device))
    return record.to(mapping.device)


def _blocks_view(t, bb):
    """`t` as (blocks, bb) bytes over its storage: each row a whole padded
    block, as swap_blocks copies it."""
    raw = torch.empty(0, dtype=torch.uint8, device=t.device)
    raw.set_(t.untyped_storage(), t.storage_offset() * t.element_size(), (t.shape[0], bb),
             (bb, 1))
    return raw


_lib.impl("swap_blocks", _swap, "CompositeExplicitAutograd")


@torch.library.register_fake("p2pt::swap_blocks", lib=_lib)
def _(src, dst, block_mapping, hid):
    _mapping_check(block_mapping)  # meta tensors land here, not in the body
    if any(t.device.type not in ("cpu", "cuda") for t in (*src, *dst)):
        raise ValueError("p2pt.torch.swap_blocks: a layer is on neither the CPU nor a GPU")
    return torch.empty(8, dtype=torch.int32, device=block_mapping.device)


def _outside_graph(src, dst, block_mapping, hid):
    """The swap of dst layers that are views (pool.unbind(0)) out of a compiled
    graph (fullgraph=True: an error): inductor copies a mutated view inside its
    storage back from the view's first byte, past the storage's end. Views at
    offset 0 leave too: asking for the offset is a graph break of its own."""
    warnings.warn("p2pt.torch.swap_blocks: dst layers that are views run outside the compiled "
                  "graph (inductor mishandles mutated views inside a storage); pass tensors of "
                  "their own to keep the swap in the graph",
                  stacklevel=3)
    return torch.ops.p2pt.swap_blocks(src, dst, block_mapping, hid)


_outside_graph = torch.compiler.disable(_outside_graph)
