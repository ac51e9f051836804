# SPDX-License-Identifier: Apache-2.0
"""The count exchange (p2pt_count_rows_async) through the package, over the
fake driver of tests/fault (a CPU stands in for the GPU, its kernels do
nothing): Handle.count_rows reaches the library with its arguments in
order (the handle counts one exchange and one kernel of a CTA a
destination), its dry run names the path "count", and a bad argument comes
back as p2pt.Error naming it. What the kernel computes is tested on GPUs
(tests/test_count_rows.c)."""
from conftest import FAKE_MEMORY, fake_library, run_python

SCRIPT = FAKE_MEMORY + r"""
routing, upto, puts, sem = mem.value, mem.value + 65536, mem.value + 131072, mem.value + 196608
h = p2pt.Handle(transport="ce")
c = h.explain_count_rows(routing, 4096, 3, upto, [puts, puts + 24], [sem])
print("explain", c.transport, c.path)
h.count_rows(routing, 4096, 3, upto, [puts, puts + 24], [sem])
h.count_rows(0, 0, 3, None, [puts], [])
p = h.properties()
print("counted", p["count_exchanges"], p["kernel_launches"], p["max_grid"])
for args, words in (((routing, 16, 0, upto, [puts], [sem]), "cols 0"),
                    ((routing, 16, 3, upto + 4, [puts], [sem]), "upto"),
                    ((routing, 16, 3, upto, [puts + 4], [sem]), "puts[0]"),
                    ((routing, 16, 3, upto, [puts], [sem + 8]), "signals[0]")):
    try:
        h.count_rows(*args)
        print("accepted", words)
    except p2pt.Error as e:
        print("refused", e.status, words in e.text)
h.close()
"""


def test_count_rows_reaches_the_library_in_order_and_names_bad_arguments(root):
    cuda = fake_library(root, "libp2pt_fake_cuda.so", "P2PT_FAKE_CUDA")
    nvrtc = fake_library(root, "libp2pt_fake_nvrtc.so", "P2PT_FAKE_NVRTC")
    r = run_python(SCRIPT, cuda, P2P_CUDA_LIBRARY=cuda, P2P_NVRTC_LIBRARY=nvrtc,
                   P2P_TRANSPORT_CACHE_DIR="off")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split("\n")[:6] == ["explain tma count", "counted 2 2 3",
                                        "refused 4 True", "refused 4 True", "refused 4 True",
                                        "refused 4 True"], r.stdout + r.stderr
