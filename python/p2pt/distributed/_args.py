# SPDX-License-Identifier: Apache-2.0
"""How p2pt.distributed names a bad argument in the ValueError that
refuses it."""
import torch
import torch.distributed as dist


def described(v, *, contiguity=True):
    """What came: a tensor's shape, dtype and device (and ", not contiguous"
    where the caller needs contiguity and it is not), or another type's
    name."""
    if not isinstance(v, torch.Tensor):
        return type(v).__name__
    note = ", not contiguous" if contiguity and not v.is_contiguous() else ""
    return f"{tuple(v.shape)} {v.dtype} on {v.device}{note}"


def positive_int(where, name, v):
    """v, an int of at least 1 (not a bool), or a ValueError naming it."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{where}: {name} must be an int of at least 1, not {v!r}")
    return v


def same_on_every_rank(where, rule, verb, mine, shown, group):
    """`mine` gathered from every rank of `group` (a collective); where a
    rank's differs, a ValueError on every rank naming it and this one:
    "{where}: {rule}; rank r {verb} {shown(theirs)}, rank q (this one)
    {shown(mine)}"."""
    every = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, mine, group=group)
    for r, theirs in enumerate(every):
        if theirs != mine:
            raise ValueError(f"{where}: {rule}; rank {r} {verb} {shown(theirs)}, rank "
                             f"{dist.get_rank(group)} (this one) {shown(mine)}")
