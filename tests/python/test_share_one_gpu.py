# SPDX-License-Identifier: Apache-2.0
"""p2pt.distributed.share between two processes that share GPU 0 (gloo as
the bootstrap: NCCL refuses two ranks on one GPU), so that a machine of
one GPU checks it for real: two tensors of one caching-allocator segment,
and one tensor shared twice while the first share's views live, each put
into by the peer through every view at odd offsets, guard bytes intact;
no export outlives its call. Skips without a GPU."""
import os
import tempfile

import pytest

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:
    pytest.skip(f"no PyTorch: {e}", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device: PyTorch sees none", allow_module_level=True)

for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(var, val)

N = 4096


def _segment_of(ptr):
    for seg in torch.cuda.memory_snapshot():
        if seg["address"] <= ptr < seg["address"] + seg["total_size"]:
            return seg["address"]
    return None


def _worker(rank, world, path, out):
    import p2pt.distributed as pd
    import p2pt.torch as pt
    from p2pt.torch import _handles
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    said = []
    a = torch.full((N,), 0xA5, dtype=torch.uint8, device=dev)
    b = torch.full((N + 5,), 0xA5, dtype=torch.uint8, device=dev)
    if _segment_of(a.data_ptr()) != _segment_of(b.data_ptr()):
        said.append("a and b lie in two segments: the case is not made")
    h = _handles._get(_handles._hid(None))
    peers_a = pd.share(a)
    exports = h.properties()["share_exports"]
    peers_b = pd.share(b)
    peers_a2 = pd.share(a)  # again, peers_a alive
    if exports or h.properties()["share_exports"]:
        said.append(f"exports outlive share(): {exports}, then "
                    f"{h.properties()['share_exports']}")
    other = 1 - rank
    g = torch.Generator(device=dev).manual_seed(7 + rank)
    data = torch.randint(0, 256, (3, 1000), dtype=torch.uint8, device=dev, generator=g)
    torch.cuda.synchronize()
    dist.barrier()
    pt.copy_(peers_a[other][3:1003], data[0])
    pt.copy_(peers_a2[other][2001:3001], data[1])
    pt.copy_(peers_b[other][N - 995:N + 5], data[2])
    torch.cuda.synchronize()
    dist.barrier()
    want = torch.randint(0, 256, (3, 1000), dtype=torch.uint8, device=dev,
                         generator=torch.Generator(device=dev).manual_seed(7 + other))
    ga = torch.full((N,), 0xA5, dtype=torch.uint8, device=dev)
    ga[3:1003], ga[2001:3001] = want[0], want[1]
    gb = torch.full((N + 5,), 0xA5, dtype=torch.uint8, device=dev)
    gb[N - 995:] = want[2]
    if not torch.equal(a, ga):
        said.append("a: a put or a guard byte differs")
    if not torch.equal(b, gb):
        said.append("b: a put or a guard byte differs")
    dist.barrier()
    with open(f"{out}.{rank}", "w") as f:
        f.write("; ".join(said) or "ok")
    del peers_a, peers_a2, peers_b
    dist.destroy_process_group()


def test_tensors_of_one_segment_and_one_shared_twice_take_puts_from_another_process():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "said")
        mp.spawn(_worker, args=(2, os.path.join(d, "rendezvous"), out), nprocs=2, join=True)
        said = [open(f"{out}.{r}").read() for r in range(2)]
    assert said == ["ok", "ok"], said
