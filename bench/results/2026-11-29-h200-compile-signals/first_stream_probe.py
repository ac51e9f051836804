# Host times of each step of the compiled-wait test, per backend, twice over.
import time, torch, p2pt, p2pt.distributed as pd
def T(): torch.cuda.synchronize() if False else None; return time.perf_counter()
h = p2pt.Handle(options={"P2P_TRANSPORT_WAIT_TIMEOUT_MS": 5000})
warm = pd.semaphores(1); pd.signal(warm[0], handle=h); pd.wait(warm[0], 1, handle=h); torch.cuda.synchronize()
for backend in ("aot_eager", "inductor", "aot_eager", "none"):
    sem = pd.semaphores(1)[0]
    torch._dynamo.reset()
    f = lambda sem: pd.wait(sem, 1, handle=h)
    waits = f if backend == "none" else torch.compile(f, backend=backend)
    pd.signal(sem, handle=h); waits(sem); torch.cuda.synchronize()
    t0 = time.perf_counter(); waits(sem); t1 = time.perf_counter()
    side = torch.cuda.Stream(); t2 = time.perf_counter()
    with torch.cuda.stream(side):
        pd.signal(sem, handle=h)
    t3 = time.perf_counter(); torch.cuda.synchronize(); t4 = time.perf_counter()
    print(f"{backend:10s} waits {t1-t0:.4f}s Stream() {t2-t1:.4f}s signal {t3-t2:.4f}s sync {t4-t3:.4f}s "
          f"sem {sem.tolist()} cur {torch.cuda.current_stream().cuda_stream} side {side.cuda_stream}", flush=True)
