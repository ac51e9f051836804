# SPDX-License-Identifier: Apache-2.0
"""What swap_blocks knows of its layers before it reads a mapping: the
checks of each layer's blocks and of the mapping's shape (_block_bytes,
_mapping_check, _swap_check), the _Layout made once per set of layer
tensors (_layout, _layouts) with its layers as the C library's
p2pt_block_layer records, and the checks that explain why the C library
refused a CPU mapping: ids, and the overlaps of the pieces the layout
builds from it (_check_ids, _check_overlaps)."""
import ctypes
import itertools
import weakref

import torch

from .. import _structs
from ._host import _held, _pageable, _side


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


def _swap_check(srcs, dsts, mapping=None):
    """Every check of swap_blocks that needs no value of the mapping: the
    block bytes of each layer."""
    if len(srcs) != len(dsts):
        raise ValueError(f"p2pt.torch.swap_blocks: {len(srcs)} src layers and {len(dsts)} dst "
                         f"layers; the lists must have the same length")
    if mapping is not None:
        _mapping_check(mapping)
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


def _check_ids(ids, limits, side, col):
    """ValueError naming the first id of column `col` outside [0, limit) of
    its layer (the smallest limit over the layers: every layer gets every
    id)."""
    if ids.numel() == 0 or not limits:
        return
    layer = min(range(len(limits)), key=lambda i: limits[i])
    limit = limits[layer]
    bad = ((ids < 0) | (ids >= limit)).nonzero()
    if bad.numel():
        r = int(bad[0, 0])
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping[{r}, {col}] = {int(ids[r])}: "
                         f"{side} block ids must be in [0, {limit}) ({side}[{layer}] has "
                         f"{limit} blocks)")


def _disjoint(ranges):
    """Whether the [start, end) byte ranges share no byte."""
    spans = sorted(r for r in ranges if r[1] > r[0])
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


class _Layout:
    """What a swap needs of its two lists of layers and of no mapping: the
    checks of _swap_check, done once, and the numbers the descriptors are
    built from. A layout serves the same tensor objects again (see
    _layout), so a swap of the same layers pays for none of it twice."""

    def __init__(self, src, dst):
        self.sizes = _swap_check(src, dst)
        self.layers = len(self.sizes)
        self.src_ptrs = tuple(t.data_ptr() for t in src)
        self.dst_ptrs = tuple(t.data_ptr() for t in dst)
        self.src_rows = [t.shape[0] for t in src]
        self.dst_rows = [t.shape[0] for t in dst]
        self.slow = _pageable("swap_blocks", [(t, f"src[{i}]") for i, t in enumerate(src)] +
                              [(t, f"dst[{i}]") for i, t in enumerate(dst)])
        uniform = self.layers and len(set(self.sizes)) == 1
        self.block = self.sizes[0] if uniform else None
        # Pieces never race when every dst layer's blocks lie apart from every
        # other dst layer's and from every src layer's: then only a repeated
        # dst id (a block written twice) can, which the ids alone tell. Views
        # that interleave (layers of a [blocks, layers, ...] tensor, a src
        # and a dst in one storage) keep the check on addresses.
        dst_spans = [(p, p + r * b) for p, r, b in zip(self.dst_ptrs, self.dst_rows, self.sizes)]
        src_spans = [(p, p + r * b) for p, r, b in zip(self.src_ptrs, self.src_rows, self.sizes)]
        self.disjoint = _disjoint(dst_spans) and all(
            _disjoint([d, s]) for d in dst_spans for s in src_spans) if self.layers else True
        # One layer per storage: the windows to register and the pinned
        # blocks to hold, found once instead of per layer and call.
        seen, self.storages = set(), []
        for side, tensors in ((0, src), (1, dst)):
            for i, t in enumerate(tensors):
                st = t.untyped_storage()
                base = st.data_ptr()
                if base not in seen:
                    seen.add(base)
                    self.storages.append((side, i, base, st.nbytes(),
                                          not t.is_cuda and t.is_pinned()))
        self.pinned = [(side, i) for side, i, _, n, pin in self.storages if pin and n]
        # _again's fast path takes the layers this layout serves: plain
        # tensors (no subclass whose torch function must see the swap) that
        # no stream is kept from (no pageable side).
        self.direct = not self.slow and all(type(t) is torch.Tensor
                                            for t in itertools.chain(src, dst))
        # Every piece crosses the host link: one side all GPU memory, the
        # other all pinned host memory.
        kinds = [{t.is_cuda for t in src}, {t.is_cuda for t in dst}]
        self.crosses_link = not self.slow and {frozenset(k) for k in kinds} == \
            {frozenset({True}), frozenset({False})}
        self.link_dir = "d2h" if kinds[0] == {True} else "h2d"  # where crosses_link
        # False once any of the tensors is gone: its id may then name
        # another tensor, which must not find this layout.
        alive = self.alive = [True]
        # The pinned storages, taken once (a call hands them to _held): let
        # go with the first tensor that goes, as the layout is then unused.
        held = self.held = [tuple((src, dst)[side][i].untyped_storage()
                                  for side, i in self.pinned)]

        def gone(_ref, alive=alive, held=held):
            alive[0] = False
            held[0] = ()

        self.refs = [weakref.ref(t, gone) for t in itertools.chain(src, dst)]
        # The layers as p2pt_block_layer records: a CPU mapping goes to
        # p2pt_copy_blocks_async, which builds the pieces in C.
        n_layers = self.layers
        self.c_layers = (_structs.BlockLayer * max(n_layers, 1))()
        for i in range(n_layers):
            self.c_layers[i] = _structs.BlockLayer(
                ctypes.sizeof(_structs.BlockLayer), self.dst_ptrs[i], self.src_ptrs[i],
                self.sizes[i], self.dst_rows[i], self.src_rows[i])
        self.c_layers_at = ctypes.addressof(self.c_layers)

    def serves(self, src, dst):
        """Whether this layout, found by the ids of `src` and `dst`, was made
        of these very tensors, which still point where they did (a tensor
        alive keeps its storage alive, so whatever was checked of the
        storage still holds). While every tensor it was made of lives, no
        other object has its id, so equal ids are the same tensors."""
        # One pass in C per list, not a Python loop per layer.
        return self.alive[0] and tuple(map(_data_ptr, src)) == self.src_ptrs and \
            tuple(map(_data_ptr, dst)) == self.dst_ptrs

    def _meta_cpu(self):
        """(layers, 1, 3) dst base, src base, 0; (layers, 1, 3) block bytes."""
        layers = self.layers
        base = torch.tensor([self.dst_ptrs, self.src_ptrs, [0] * layers], dtype=torch.int64)
        block = torch.tensor(self.sizes, dtype=torch.int64)
        return (base.t().reshape(layers, 1, 3).contiguous(),
                block[:, None, None].expand(layers, 1, 3).contiguous())

    def pieces(self, mapping):
        """The (layers * n, 3) int64 descriptors of a CPU mapping, layer-major
        (for the checks that explain a refusal): for layer l and row i, dst
        base + d * block bytes, src base + s * block bytes, block bytes;
        built as base + [d, s, 1] * block bytes, in three ops where every
        layer has one block size."""
        n, layers = mapping.shape[0], self.layers
        base, block = self._meta_cpu()
        ids = torch.nn.functional.pad(mapping.flip(1), (0, 1), value=1)  # (n, 3): d, s, 1
        descs = torch.empty(layers, n, 3, dtype=torch.int64)
        if self.block is not None:
            torch.add(base, ids, alpha=self.block, out=descs)
        else:
            torch.add(base, ids * block, out=descs)
        return descs.view(layers * n, 3)

    def windows(self, h, device, src, dst):
        """Register a window for each storage not yet in one (on first use,
        or after release or a handle's close)."""
        for side, i, base, nbytes, _ in self.storages:
            w = h._windows.get((device, base))
            if w is None or w.nbytes < nbytes or not w.registered:
                t = (src, dst)[side][i]
                h.window(device, base, nbytes, t.untyped_storage())

    def hold_pinned(self, where=None):
        """_hold_pinned for the pinned storages, known already (the tuple
        itself: a tensor that goes later takes it from the layout, not
        from _held)."""
        if self.held[0]:
            _held.hold(self.held[0], where)


_data_ptr = torch.Tensor.data_ptr
_layouts = {}  # (ids of the src tensors, ids of the dst tensors) -> _Layout
_LAYOUTS_MAX = 64


def _layout(src, dst):
    """The _Layout of these layers: the one made for these very tensors
    before, else a new one (all checks made; ValueError on bad layers).
    vLLM and the like swap the same per-layer tensors at every step."""
    key = (tuple(map(id, src)), tuple(map(id, dst)))
    lay = _layouts.get(key)
    if lay is not None and lay.serves(src, dst):
        return lay
    lay = _Layout(src, dst)
    if len(_layouts) >= _LAYOUTS_MAX:
        # Views made afresh at every call never come back: start over
        # rather than keep their weak references.
        _layouts.clear()
    _layouts[key] = lay
    return lay


def _check_overlaps(descs, n):
    """Refuse a batch whose pieces would race: a destination written twice,
    or read by another piece (pieces run in any order, at once)."""
    d, s, b = descs[:, 0], descs[:, 1], descs[:, 2]
    order = torch.argsort(d)
    ds, de = d[order], d[order] + b[order]
    clash = (ds[1:] < de[:-1]).nonzero()
    if clash.numel():
        k = int(clash[0, 0])
        p, q = sorted((int(order[k]), int(order[k + 1])))
        raise ValueError(f"p2pt.torch.swap_blocks: pieces write the same bytes: block_mapping "
                         f"row {p % n} of layer {p // n} and row {q % n} of layer {q // n}; "
                         f"each destination block may appear once")
    # The last destination starting before a source's end is the only one
    # that can overlap it: destinations are disjoint, so their ends rise too.
    idx = torch.searchsorted(ds, s + b) - 1
    hit = (idx >= 0) & (de[idx.clamp(min=0)] > s)
    bad = hit.nonzero()
    if bad.numel():
        p = int(bad[0, 0])
        q = int(order[int(idx[p])])
        raise ValueError(f"p2pt.torch.swap_blocks: block_mapping row {p % n} of layer {p // n} "
                         f"reads bytes that row {q % n} of layer {q // n} writes; a block may "
                         f"not be both a source and a destination")
