/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The built-in crossover tables of `auto` (auto_table.h gives the format),
 * one per architecture and, where they differ, per GPU. Each says which
 * section of bench/results/auto.md its bands come from; a machine that differs is
 * measured with `p2pt-bench --mode calibrate` and its table loaded with
 * P2P_TRANSPORT_AUTO_TABLE. A CPU test parses every one of them.
 */
#include <string.h>

#include "auto_table.h"

/*
 * sm_90. Local copies and batches from `p2pt-bench --mode calibrate`
 * (bench/results/auto.md, "P2P_TRANSPORT=auto"; the streaming kernel of
 * bench/results/copies.md takes local copies from P2P_TRANSPORT_STREAM_MIN):
 * on one H100 and on one H200 tma was as fast or faster at every size and
 * for every batch measured. The two GPUs keep a table each, measured apart,
 * although they read alike. Push and pull come from the one two-GPU machine
 * measured (bench/results/copies.md, its first section): push to ce at every
 * size, pull to tma up to the crossover the table names, then ce.
 *
 * Pinned host memory (h2d, d2h) from one calibrate run on each GPU
 * (bench/results/auto.md, "pinned host memory"), written as calibrate wrote
 * them: single copies to ce (the copy engine was as fast or faster at every
 * size back to back), batches to tma up to a mean piece of 128-512 KiB
 * (13x faster than ce's batched copy at 4 KiB pieces), then ce.
 *
 * `link`: the CTAs a kernel moving only pinned-host pieces takes, from the
 * CTA sweep of `p2pt-bench --mode overlap` beside a cuBLAS GEMM
 * (bench/results/offload.md): the fewest that reach about 0.9 of the
 * contiguous copy alone and keep the GEMM's slowdown within that of a
 * copy-engine copy. More add no bandwidth and hold SMs the GEMM waits for.
 * Measured on an H100; the H200 table carries the same numbers, not yet
 * measured there. `link peer`: the CTAs a kernel moving only pieces to or
 * from peer GPUs takes (bench/results/peer.md: scattered rows over NVLink
 * reach about 0.90 of a contiguous copy-engine copy with 32 CTAs and 0.94
 * with every SM; each SM moves at most about 11 GB/s to a peer).
 */
static const char sm90_h100[] = "p2pt-auto 1\n"
                                "arch sm_90\n"
                                "device NVIDIA H100 80GB HBM3\n"
                                "copy local 0 tma\n"
                                "copy push 0 ce\n"
                                "copy pull 0 tma\n"
                                "copy pull 32M ce\n"
                                "copy h2d 0 ce\n"
                                "graph h2d 0 ce\n"
                                "graph h2d 11588K tma\n"
                                "graph h2d 23172K ce\n"
                                "copy d2h 0 ce\n"
                                "graph d2h 0 tma\n"
                                "graph d2h 24K ce\n"
                                "graph d2h 48K tma\n"
                                "graph d2h 184K ce\n"
                                "batch 0 tma\n"
                                "batch h2d 0 tma\n"
                                "batch h2d 512K ce\n"
                                "batch d2h 0 tma\n"
                                "batch d2h 128K ce\n"
                                "link h2d 8\n"
                                "link d2h 3\n"
                                "link peer 32\n";

static const char sm90_h200[] = "p2pt-auto 1\n"
                                "arch sm_90\n"
                                "device NVIDIA H200\n"
                                "copy local 0 tma\n"
                                "copy push 0 ce\n"
                                "copy pull 0 tma\n"
                                "copy pull 32M ce\n"
                                "copy h2d 0 ce\n"
                                "copy d2h 0 ce\n"
                                "graph d2h 0 tma\n"
                                "graph d2h 184K ce\n"
                                "batch 0 tma\n"
                                "batch h2d 0 tma\n"
                                "batch h2d 128K ce\n"
                                "batch d2h 0 tma\n"
                                "batch d2h 128K ce\n"
                                "link h2d 8\n"
                                "link d2h 3\n"
                                "link peer 32\n";

/* The first entry of an architecture is its default (an sm_90 GPU that is
 * neither gets the H100's table). */
const struct p2pt_auto_builtin p2pt__auto_builtins[] = {
    {90, NULL, sm90_h100},
    {90, "H200", sm90_h200},
    {0, NULL, NULL},
};

const struct p2pt_auto_builtin *p2pt__auto_builtin_for(int cc, const char *name)
{
    const struct p2pt_auto_builtin *first = NULL;
    for (const struct p2pt_auto_builtin *b = p2pt__auto_builtins; b->text != NULL; b++) {
        if (b->cc != cc)
            continue;
        if (b->device != NULL && strstr(name, b->device) != NULL)
            return b;
        if (first == NULL)
            first = b;
    }
    return first;
}
