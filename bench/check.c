/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Whether a copy wrote what it should and nothing else: the copy as timed,
 * into a poisoned destination, compared byte for byte with a copy-engine
 * reference of the same source, with guard bytes on each side that must stay
 * poisoned; and a device batch's status record. A difference is counted
 * and reported after its table row, never fatal, so the rest of the run
 * still reports.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

#define GUARD 256 /* poisoned bytes checked on each side of a checked copy */
#define CHECK_CHUNK (64 * MiB) /* host staging for the comparison */

/* The guards lie in the slack allocated past every pool. */
_Static_assert(2 * GUARD <= SLACK, "the guards must fit in a pool's slack");

/* Pinned host staging for the comparison, allocated on first use. */
static unsigned char *stage_a, *stage_b;
static const struct bench_gpu *stage_owner;

static bool stage_alloc(void)
{
    void *pa = NULL, *pb = NULL;
    if (stage_a)
        return true;
    if (!bench_use(&bench_gpus[0]))
        goto fail;
    CU(tcu.cuMemAllocHost(&pa, CHECK_CHUNK));
    stage_a = pa;
    CU(tcu.cuMemAllocHost(&pb, CHECK_CHUNK));
    stage_b = pb;
    stage_owner = &bench_gpus[0];
    return true;
fail:
    return false;
}

void bench_check_free(void)
{
    if (stage_owner == NULL)
        return;
    CU_RELEASE(tcu.cuCtxSetCurrent(stage_owner->ctx));
    if (stage_a)
        CU_RELEASE(tcu.cuMemFreeHost(stage_a));
    if (stage_b)
        CU_RELEASE(tcu.cuMemFreeHost(stage_b));
    stage_a = stage_b = NULL;
    stage_owner = NULL;
}

/*
 * The copy as timed (same alignment: pool offsets are 256-byte aligned) into
 * a poisoned destination, against a cuMemcpyAsync of the same source into
 * the reference buffer: every byte compared, and GUARD bytes on each side
 * still poisoned. Returns 1 when equal, 0 on a difference (explained in
 * `why`), -1 when a call failed (bench_err).
 */
static int check_dir(p2pt_handle *h, struct bench_dir *d, size_t bytes, char *why,
                     size_t why_len)
{
    CUdeviceptr src = d->src.base + GUARD, dst = d->dst.base + GUARD;
    if (!stage_alloc() || !bench_use(d->dst.g))
        goto fail;
    CU(tcu.cuMemsetD8(d->dst.base, BENCH_POISON, bytes + 2 * GUARD));
    CU(tcu.cuCtxSynchronize());
    if (!bench_use(d->g))
        goto fail;
    CU(tcu.cuMemcpyAsync(d->ref.base, src, bytes, d->s));
    P2(p2pt_copy_async(h, bench_dptr(dst), bench_dptr(src), bytes, d->s));
    CU(tcu.cuStreamSynchronize(d->s));

    if (!bench_use(d->dst.g))
        goto fail;
    CU(tcu.cuMemcpyDtoH(stage_a, d->dst.base, GUARD));
    CU(tcu.cuMemcpyDtoH(stage_a + GUARD, dst + bytes, GUARD));
    for (size_t i = 0; i < 2 * GUARD; i++)
        if (stage_a[i] != BENCH_POISON) {
            snprintf(why, why_len, "guard byte %s the copy overwritten (offset %s%zu)",
                     i < GUARD ? "before" : "after", i < GUARD ? "-" : "+",
                     i < GUARD ? GUARD - i : i - GUARD);
            return 0;
        }
    for (size_t off = 0; off < bytes; off += CHECK_CHUNK) {
        size_t n = bytes - off < CHECK_CHUNK ? bytes - off : CHECK_CHUNK;
        if (!bench_use(d->dst.g))
            goto fail;
        CU(tcu.cuMemcpyDtoH(stage_a, dst + off, n));
        if (!bench_use(d->g))
            goto fail;
        CU(tcu.cuMemcpyDtoH(stage_b, d->ref.base + off, n));
        if (memcmp(stage_a, stage_b, n) != 0) {
            size_t first = 0, wrong = 0;
            for (size_t i = n; i-- > 0;)
                if (stage_a[i] != stage_b[i]) {
                    first = i;
                    wrong++;
                }
            snprintf(why, why_len,
                     "byte %zu of %zu is 0x%02x, the copy engine wrote 0x%02x (%zu wrong "
                     "byte%s in [%zu, %zu))",
                     off + first, bytes, stage_a[first], stage_b[first], wrong,
                     wrong == 1 ? "" : "s", off, off + n);
            return 0;
        }
    }
    return 1;
fail:
    return -1;
}

const char *bench_check_all(p2pt_handle *h, struct bench_setup *su, size_t bytes,
                            int transport, const char *what)
{
    const char *tname = bench_transport_names[transport];
    if (!bench_opt.check)
        return "-";
    for (int k = 0; k < su->ndirs; k++) {
        char why[256] = "";
        int r = check_dir(h, &su->d[k], bytes, why, sizeof(why));
        if (r < 0)
            bench_fatal("%s, %s, %zu bytes: check", what, tname, bytes);
        if (r == 0) {
            bench_row_check_failed("%s, %s, %zu bytes, GPU %d -> GPU %d: %s", what, tname,
                                   bytes, su->d[k].src.g->ordinal, su->d[k].dst.g->ordinal,
                                   why);
            return "FAIL";
        }
    }
    return "ok";
}

bool bench_check_batch_status(CUdeviceptr workspace, size_t posted, const char *label,
                              const char *whose, bool *ok)
{
    p2pt_batch_status bs;
    *ok = true;
    CU(tcu.cuMemcpyDtoH(&bs, workspace, sizeof(bs)));
    if (bs.count != posted || bs.copied != posted || bs.skipped != 0) {
        bench_row_check_failed("%s: %s batch status reads count %u, copied %u, skipped %u "
                               "(first bad %u, reasons 0x%x); %zu pieces were posted",
                               label, whose, bs.count, bs.copied, bs.skipped, bs.first_bad,
                               bs.reasons, posted);
        *ok = false;
    }
    return true;
fail:
    return false;
}
