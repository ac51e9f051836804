# SPDX-License-Identifier: Apache-2.0
"""What every rank of a group learns of one rank's failure: a step that
may fail on one rank alone (an import, an allocation) is followed by a
gather of how it went, so that every rank raises, naming the rank that
failed, and none waits for it in a later collective."""
import torch.distributed as dist

from .._lib import Error


def failed(e):
    """What a rank says of its failure: (status, text) of a p2pt.Error, or
    (None, the exception named)."""
    if isinstance(e, Error):
        return (e.status, e.text)
    return (None, f"{type(e).__name__}: {e}")


def raise_first(where, said, rank, mine):
    """Where a rank said it failed (said[r] not None): raise on every rank,
    this rank's own exception `mine` if it is the first that failed, else
    one naming that rank, a p2pt.Error of its status where it had one."""
    for r, why in enumerate(said):
        if why is None:
            continue
        if r == rank and mine is not None:
            raise mine
        status, text = why
        text = f"{where}: rank {r} failed: {text}"
        raise Error(status, text) if status is not None else RuntimeError(text)


def on_every_rank(where, group, step, *, every=False):
    """step() on this rank, then how it went on every rank (a gather, so
    also a barrier): its result where every rank's step returned (with
    `every`, every rank's result in rank order, which then crosses the
    gather), else raise_first's exception on every rank."""
    mine, out = None, None
    try:
        out = step()
    except Exception as e:
        mine = e
    said = [None] * dist.get_world_size(group)
    dist.all_gather_object(said, (None if mine is None else failed(mine), out if every else None),
                           group=group)
    raise_first(where, [why for why, _ in said], dist.get_rank(group), mine)
    return [got for _, got in said] if every else out
