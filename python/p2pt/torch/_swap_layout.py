# SPDX-License-Identifier: Apache-2.0
"""A swap's layers, checked once: what the C library cannot see of them
(_swap_check: dtypes, shapes and strides alike, blocks inside their
storage), their C layout (p2pt.BlockLayout: ids, races and the host link
are the C library's), their storages (windows, pinned holds), and the
layout cache (_layouts, _layout), keyed by the ids of the layer tensors."""
import itertools
import operator
import weakref

import torch

from .. import _handle
from ._handles import _windows
from ._host import _pageable, _pinned_storages, _side


def _block_bytes(t, name):
    """The bytes of one block of `t` (stride(0) elements, as vLLM), after
    the checks that keep every copy inside `t`'s own blocks and storage."""
    if t.dim() < 1:
        raise ValueError(f"p2pt.torch.swap_blocks: {name} is 0-d; expected blocks along dim 0")
    extent = 1
    for size, stride in zip(t.shape[1:], t.stride()[1:]):
        if size == 0:
            raise ValueError(f"p2pt.torch.swap_blocks: {name} of shape {tuple(t.shape)} has "
                             f"empty blocks")
        extent += (size - 1) * stride
    if t.stride(0) < extent:
        raise ValueError(f"p2pt.torch.swap_blocks: {name} has overlapping blocks: stride(0) is "
                         f"{t.stride(0)} elements, but a block spans {extent} (shape "
                         f"{tuple(t.shape)}, strides {t.stride()}; e.g. after expand); "
                         f"make it contiguous")
    bb = t.stride(0) * t.element_size()
    if t.shape[0]:
        end = (t.storage_offset() + t.shape[0] * t.stride(0)) * t.element_size()
        have = t.untyped_storage().nbytes()
        if end > have:
            raise ValueError(f"p2pt.torch.swap_blocks: {name}: its last block, padded to "
                             f"stride(0) = {t.stride(0)} elements, ends at byte {end} of a "
                             f"storage of {have} bytes; a block may not run past the storage")
    return bb


def _mapping_check(mapping):
    if mapping.dtype != torch.int64 or mapping.dim() != 2 or mapping.shape[1] != 2:
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping must be an int64 tensor of "
                         f"shape [n, 2] (src block, dst block); got {mapping.dtype} of shape "
                         f"{tuple(mapping.shape)}")
    if mapping.device.type not in ("cpu", "cuda"):
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping is on {mapping.device}; "
                         f"expected the CPU (a host batch) or the GPU (a device batch)")


def _swap_check(srcs, dsts):
    """What the C library cannot see of the layers: the block bytes of
    each, its dtype, shape and strides alike on both sides, where it is."""
    if len(srcs) != len(dsts):
        raise ValueError(f"p2pt.torch.swap_blocks: {len(srcs)} src layers and {len(dsts)} dst "
                         f"layers; the lists must have the same length")
    sizes = []
    for i, (s, d) in enumerate(zip(srcs, dsts)):
        if s.dtype != d.dtype or tuple(s.shape[1:]) != tuple(d.shape[1:]) or \
                s.stride() != d.stride():
            raise ValueError(f"p2pt.torch.swap_blocks: layer {i}: src is {s.dtype} of shape "
                             f"{tuple(s.shape)}, strides {s.stride()}; dst is {d.dtype} of "
                             f"shape {tuple(d.shape)}, strides {d.stride()}: blocks must have "
                             f"the same dtype, shape and strides on both sides")
        for t, role in ((s, "src"), (d, "dst")):
            _side(t, "swap_blocks", f"{role}[{i}]")
        _block_bytes(d, f"dst[{i}]")
        sizes.append(_block_bytes(s, f"src[{i}]"))
    return sizes


class _Layout:
    """A swap's src and dst layers, checked once and served again to the
    same tensors (_layout): a server swaps the same layers at every step."""

    def __init__(self, src, dst):
        self.sizes = _swap_check(src, dst)
        self.src_ptrs = tuple(t.data_ptr() for t in src)
        self.dst_ptrs = tuple(t.data_ptr() for t in dst)
        self.slow = _pageable("swap_blocks", [(t, f"src[{i}]") for i, t in enumerate(src)] +
                              [(t, f"dst[{i}]") for i, t in enumerate(dst)])
        # None for no layers (nothing to swap): the C library takes one or more.
        self.c = _handle.BlockLayout([
            (d.data_ptr(), s.data_ptr(), bb, d.shape[0], s.shape[0])
            for s, d, bb in zip(src, dst, self.sizes)]) if self.sizes else None
        # A GPU mapping of n rows needs ws_base + n * ws_row bytes (the
        # status record, the count, a descriptor a piece).
        self.ws_base = self.c.workspace_bytes(0) if self.c else 0
        self.ws_row = self.c.workspace_bytes(1) - self.ws_base if self.c else 0
        # Each storage once: the windows a GPU mapping needs, and the pinned
        # storages to hold while a swap may still touch them.
        self.storages = list({t.untyped_storage().data_ptr(): t.untyped_storage()
                              for t in itertools.chain(src, dst)
                              if t.untyped_storage().nbytes()}.values())
        self.pinned = _pinned_storages(itertools.chain(src, dst))
        self.windowed = None  # (weakref to a handle, device, its windows of the storages)
        # Once a tensor is gone its id may name another, which must not find
        # this layout; its storages go with it (swaps hand the pinned ones
        # to their handle's hold first).
        self.alive = True
        me = weakref.ref(self)

        def gone(_ref):
            lay = me()
            if lay is not None:
                lay.alive, lay.pinned, lay.storages = False, (), []

        self.refs = [weakref.ref(t, gone) for t in itertools.chain(src, dst)]

    def windows(self, h, device):
        """A window of each storage for `device` on handle `h` (what a GPU
        mapping's batch may touch): registered at the first such swap,
        again where one went (released, or another handle)."""
        got = self.windowed
        if got is None or got[0]() is not h or got[1] != device or \
                not all(map(_registered, got[2])):
            self.windowed = (weakref.ref(h), device, _windows(h, device, self.storages))

    def serves(self, src, dst):
        """Whether this layout, found by the ids of `src` and `dst` (the same
        tensors while all it was made of live), was made of them where they
        point now (moved by set_: checked afresh)."""
        return self.alive and tuple(map(_data_ptr, src)) == self.src_ptrs and \
            tuple(map(_data_ptr, dst)) == self.dst_ptrs


_data_ptr = torch.Tensor.data_ptr
_registered = operator.attrgetter("registered")
_layouts = {}  # (ids of the src tensors, ids of the dst tensors) -> _Layout


def _layout(src, dst):
    """The _Layout of these very tensors: the one made before, else a new
    one (ValueError on bad layers)."""
    key = (tuple(map(id, src)), tuple(map(id, dst)))
    lay = _layouts.get(key)
    if lay is not None and lay.serves(src, dst):
        return lay
    lay = _Layout(src, dst)
    if len(_layouts) >= 64:  # views made afresh at every call never come back
        _layouts.clear()
    _layouts[key] = lay
    return lay
