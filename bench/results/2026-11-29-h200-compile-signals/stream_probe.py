# Which stream a custom op's body runs on when called inside a torch.cuda.stream context, eagerly and compiled.
import torch
seen = []
@torch._dynamo.disable
def rec(s): seen.append(s)
def body(x: torch.Tensor) -> None:
    rec(torch.cuda.current_stream().cuda_stream)
op = torch.library.custom_op("probe::cur", body, mutates_args=("x",))
@op.register_fake
def _(x): return None
s = torch.cuda.Stream()
x = torch.zeros(4, device="cuda")
def arg(x, s):
    with torch.cuda.stream(s):
        torch.ops.probe.cur(x)
    return x + 1
def closure(x):
    with torch.cuda.stream(s):
        torch.ops.probe.cur(x)
    return x + 1
main = torch.cuda.current_stream().cuda_stream
print("torch", torch.__version__, "side", s.cuda_stream, "main", main)
for name, fn, args in (("stream as argument", arg, (x, s)), ("stream from closure", closure, (x,))):
    for b in ("eager", "aot_eager", "inductor"):
        seen.clear(); torch._dynamo.reset()
        try:
            torch.compile(fn, backend=b)(*args)
            print(f"{name:20s} {b:10s}", ["side" if v == s.cuda_stream else "main" if v == main else v for v in seen])
        except Exception as e:
            print(f"{name:20s} {b:10s} ERR {type(e).__name__}: {str(e).splitlines()[0][:200]}")
