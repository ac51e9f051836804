# Which address an operation of torch.library that mutates a tensor is given under torch.compile: the offset from the tensor passed (0: the tensor itself).
import torch
seen = []
@torch._dynamo.disable
def rec(x): seen.append(x)
def body(sem: torch.Tensor, hid: int) -> None:
    rec(sem.data_ptr())
op = torch.library.custom_op("probe::sig", body, mutates_args=("sem",))
@op.register_fake
def _(sem, hid): return None
sem = torch.zeros(8, 4, dtype=torch.int64)
def f(sem):
    torch.ops.probe.sig(sem[3], 0)
for b in ("eager", "aot_eager", "inductor"):
    seen.clear(); torch._dynamo.reset()
    torch.compile(f, backend=b)(sem)
    print(b, [p - sem[3].data_ptr() for p in seen])
def g(sem):
    torch.ops.probe.sig(sem, 0)
for b in ("aot_eager", "inductor"):
    seen.clear(); torch._dynamo.reset()
    torch.compile(g, backend=b)(sem[3])
    print("row arg", b, [p - sem[3].data_ptr() for p in seen])
