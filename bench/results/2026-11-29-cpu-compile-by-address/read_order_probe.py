# Reads of memory that an operation declared mutates_args="unknown" writes by address, not through an argument: one before it, one after.
import torch
dst = torch.zeros(1024)
def body(descs: torch.Tensor) -> torch.Tensor:
    dst.fill_(7.0)  # memory the op reaches by address, not through an argument
    return torch.zeros(1)
op = torch.library.custom_op("probe::byaddr", body, mutates_args="unknown")
@op.register_fake
def _(descs): return torch.empty(1)
def f(descs, d):
    a = d.sum()
    op(descs)
    b = d.sum()
    c = (d * 2).sum()
    return a, b, c
for bk in ("aot_eager", "inductor"):
    dst.zero_(); torch._dynamo.reset()
    a, b, c = torch.compile(f, backend=bk)(torch.zeros(4, 3, dtype=torch.int64), dst)
    print(bk, "before", a.item(), "after", b.item(), (c.item()), "(want 0, 7168, 14336)")
