# SPDX-License-Identifier: Apache-2.0
"""Tensors shared between the ranks of a process group, one process per
GPU: every rank exports its tensor's memory (p2pt_share_export), the blobs
travel through torch.distributed, and every rank imports every peer's for
its own device (p2pt_share_import), where p2pt's batches and signals reach
it. A tensor from PyTorch's symmetric memory is taken as it is: its peers'
buffers are already mapped here.

An export lives for the call alone: every rank imports, the ranks say
how that went (a collective), and every rank ends its export, whose
imports stay mapped. A rank whose export or import fails makes the call
fail on every rank, naming it, so that no rank waits for it in a later
collective."""
import torch
import torch.distributed as dist

from .._lib import Error
from ..torch import _handles
from ._agree import on_every_rank
from ._args import described, same_on_every_rank


def _as_tensor(ptr, nbytes, device, owner):
    """A uint8 CUDA tensor over [ptr, ptr + nbytes) of `device`, keeping
    `owner` alive as long as it lives (the __cuda_array_interface__
    protocol: torch holds the object)."""
    class _Mem:
        __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                    "data": (ptr, False), "version": 3, "strides": None}
        keep = owner
    return torch.as_tensor(_Mem(), device=torch.device("cuda", device))


class _Import:
    """An import, closed when the last tensor over it is freed."""

    def __init__(self, h, imp):
        self.h, self.imp = h, imp

    def __del__(self):
        try:
            if self.h.pointer:
                self.h.share_close(self.imp)
        except Exception:  # interpreter exit: the handle's finalize closes it
            pass


def _symmetric_views(sh, tensor):
    """Every rank's `tensor` in PyTorch's symmetric memory `sh`: this
    rank's own, and each peer's buffer at the offset `tensor` has in this
    rank's (a view may start inside the buffer)."""
    size = tensor.element_size()
    at = tensor.data_ptr() - sh.buffer_ptrs[sh.rank] if hasattr(sh, "buffer_ptrs") else \
        tensor.storage_offset() * size
    if at < 0 or at % size:
        raise ValueError(f"p2pt.distributed.share: a tensor {at} bytes into its symmetric "
                         f"buffer, not a whole number of its {size}-byte elements")
    return [sh.get_buffer(r, tensor.shape, tensor.dtype, at // size) if r != sh.rank
            else tensor for r in range(sh.world_size)]


def _symmetric_peers(tensor, group):
    """The peers' buffers of a symmetric-memory tensor, or None when it is
    not one (or PyTorch has no symmetric memory)."""
    try:
        from torch.distributed import _symmetric_memory as symm_mem
    except ImportError:
        return None
    try:
        # PyTorch's rendezvous takes a group or its name, not None; it
        # returns None for a tensor not of its memory (PyTorch 2.11), or
        # raises (earlier ones).
        sh = symm_mem.rendezvous(tensor, group if group is not None else dist.group.WORLD)
    except Exception:
        return None
    if sh is None:
        return None
    return _symmetric_views(sh, tensor)


def _exchange(h, device, base, nbytes, offset, group):
    """Export [base, base + nbytes) of this rank, import every peer's for
    `device`, end the export (a collective of two gathers): the peers'
    [(address, import)] at their `offset`, None at this rank's."""
    where = "p2pt.distributed.share"
    rank = dist.get_rank(group)
    exported, made, ok = [], [], False

    def export():
        exported.append(h.share_export(base, nbytes))
        return exported[0], offset
    try:
        every = on_every_rank(where, group, export, every=True)

        def imports():
            out = [None] * len(every)
            for r, (peer_blobs, at) in enumerate(every):
                if r != rank:
                    ptr, imp = h.share_import(device, peer_blobs)
                    made.append(imp)
                    out[r] = (ptr + at, imp)
            return out
        # Its gather is also the barrier after which no peer imports this
        # rank's export.
        out = on_every_rank(where, group, imports)
        ok = True
        return out
    finally:
        for imp in made if not ok else ():
            try:
                h.share_close(imp)
            except Error:  # the failure on the way out is the one to tell
                pass
        if exported:
            try:
                h.share_unexport(base)
            except Error:
                if ok:
                    raise


def share(tensor, group=None, *, handle=None):
    """Every rank's `tensor` (the same shape and dtype on every rank, a
    contiguous CUDA tensor of this rank's device), as a list indexed by
    rank: this rank's own tensor, and a view of each peer's memory mapped
    for this device, in which p2pt's copies, batches and signals put and
    get. Collective: every rank of `group` calls it; a rank whose tensor
    has another shape or dtype than a peer's gets a ValueError on every
    rank, naming both. A tensor of PyTorch's symmetric memory is shared
    through PyTorch's rendezvous, which waits for every rank: pass one on
    every rank or on none. The peers' memory stays mapped while a
    returned tensor over it lives; the export ends before the call returns
    (an export of the same storage this handle made itself ends with it).
    A rank whose export or import fails raises its p2pt.Error, and every
    other rank one naming it: no rank is left waiting."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_cuda or not tensor.is_contiguous():
        raise ValueError(f"p2pt.distributed.share: expected a contiguous CUDA tensor, "
                         f"not {described(tensor)}")
    h = _handles._get(_handles._hid(handle))
    device = tensor.device.index
    peers = _symmetric_peers(tensor, group)
    if peers is not None:
        # Mapped here by PyTorch: windows of this device, as imports are.
        for t in peers:
            _handles._windows(h, device, [t.untyped_storage()])
        return peers
    # Every rank's shape and dtype first, so that a rank that passed
    # another raises on every rank, before anything is exported.
    same_on_every_rank("p2pt.distributed.share", "every rank passes a tensor of one shape and "
                       "dtype", "passed", (tuple(tensor.shape), str(tensor.dtype)),
                       lambda k: f"{list(k[0])} {k[1]}", group)
    s = tensor.untyped_storage()
    # The whole storage crosses (a view may start inside it), with the
    # tensor's offset in it.
    got = _exchange(h, device, s.data_ptr(), s.nbytes(), tensor.data_ptr() - s.data_ptr(), group)
    # Each import is closed once the last tensor over it is freed: owned
    # first, so that nothing below leaves one open.
    owners = [None if peer is None else _Import(h, peer[1]) for peer in got]
    out = []
    for r, peer in enumerate(got):
        if peer is None:
            out.append(tensor)
            continue
        flat = _as_tensor(peer[0], tensor.nbytes, device, owners[r])
        out.append(flat.view(tensor.dtype).view(tensor.shape))
    return out
