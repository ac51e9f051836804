# Which tensor p2pt.torch.copy_ (pageable CPU tensors: its torch path) writes under torch.compile, and whether dst ends with src.
import torch, warnings
import p2pt.torch as pt
from p2pt.torch import _ops
seen = []
real = _ops._flat_bytes
def rec(t):
    seen.append(t.data_ptr()); return real(t)
_ops._flat_bytes = rec
class C: pointer = 1
warnings.simplefilter("ignore")
for b in ("aot_eager", "inductor"):
    dst, src = torch.zeros(8), torch.arange(8.0)
    seen.clear(); torch._dynamo.reset()
    def f(dst, src):
        pt.copy_(dst, src, handle=C()); return dst.sum()
    torch.compile(f, backend=b)(dst, src)
    print(b, "dst seen" if seen[0] == dst.data_ptr() else "a copy of dst", torch.equal(dst, src))
