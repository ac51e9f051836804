# SPDX-License-Identifier: Apache-2.0
"""p2pt for one process per GPU, with torch.distributed as the bootstrap:
tensors shared between the ranks of a group (share), semaphores and the
signal and wait operations a captured graph keeps (semaphores, signal,
wait), and an alltoallv of rows whose counts only the GPU knows
(AlltoallV: MoE dispatch and combine with no host sync).

    import torch.distributed as dist, p2pt.distributed as pd
    dist.init_process_group("nccl")
    peers = pd.share(buf)              # every rank's buf, mapped here
    sems = pd.semaphores(2)            # this rank's; share them too
    peer_sems = pd.share(sems)
    p2pt.torch.copy_(peers[1][:n], x)  # a put into rank 1's buf
    pd.signal(peer_sems[1][0])         # after it
    pd.wait(sems[0], 1)                # on rank 1: before it reads

docs/SIGNALS.md says what a signal guarantees. Uses PyTorch's symmetric
memory (torch.distributed._symmetric_memory) for a tensor allocated there;
p2pt's own export and import otherwise.
"""
from ._alltoallv import AlltoallV
from ._share import share
from ._signals import semaphores, signal, wait

__all__ = ["share", "semaphores", "signal", "wait", "AlltoallV"]
