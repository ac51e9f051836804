/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The alltoall mode's buffers for one shape (alltoall.h has the layout):
 * which rows go where, every GPU's source rows, packed send buffer,
 * receive and reference buffers, and the descriptors of its batch on the
 * host and in its memory. Everything is freed between shapes: at 64 KiB
 * rows a GPU's sources alone are a gigabyte.
 */
#include <stdlib.h>
#include <string.h>

#include "alltoall.h"

bool a2a_patterns(struct a2a *A)
{
    for (int g = 0; g < A->n; g++) {
        unsigned char *p = malloc(BENCH_PATTERN_PERIOD);
        if (p == NULL) {
            bench_set_err("out of host memory (%u bytes)", BENCH_PATTERN_PERIOD);
            return false;
        }
        bench_pattern(100 + (uint64_t)g, p, BENCH_PATTERN_PERIOD);
        A->gpu[g].pattern = p;
    }
    return true;
}

size_t a2a_shape_bytes(const struct a2a *A)
{
    size_t src = A->rows * A->row_bytes, packed = (size_t)(A->n - 1) * A->k * A->row_bytes;
    size_t small = 4096; /* the count, rounded up as allocations are */
    return src + packed + 2 * A->recv_bytes + A->count * sizeof(p2pt_copy_desc) + small +
           p2pt_batch_workspace_bytes((uint32_t)A->count);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* k distinct rows of `rows` for every (source, destination) pair: a
 * partial Fisher-Yates shuffle of one identity permutation (a fixed seed:
 * the same picks in every run), undone after each pair so the next starts
 * from the identity again, then sorted. */
static bool make_picks(struct a2a *A)
{
    size_t n = (size_t)A->n;
    uint32_t *perm = malloc(A->rows * sizeof(*perm));
    size_t *partner = malloc(A->k * sizeof(*partner));
    A->pick = calloc(n * n * A->k, sizeof(*A->pick));
    if (perm == NULL || partner == NULL || A->pick == NULL) {
        free(perm);
        free(partner);
        bench_set_err("out of host memory for %zu x %zu x %zu row picks", n, n, A->k);
        return false;
    }
    for (size_t i = 0; i < A->rows; i++)
        perm[i] = (uint32_t)i;
    for (int s = 0; s < A->n; s++)
        for (int d = 0; d < A->n; d++) {
            if (d == s)
                continue;
            uint64_t x = ((uint64_t)s << 32 | (uint64_t)d) * 0x9E3779B97F4A7C15ull + 1;
            for (size_t i = 0; i < A->k; i++) {
                size_t j = i + (size_t)(batch_rng(&x) % (A->rows - i));
                uint32_t t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
                partner[i] = j;
            }
            uint32_t *out = (uint32_t *)a2a_pick(A, s, d);
            memcpy(out, perm, A->k * sizeof(*out));
            qsort(out, A->k, sizeof(*out), cmp_u32);
            for (size_t i = A->k; i-- > 0;) {
                uint32_t t = perm[i];
                perm[i] = perm[partner[i]];
                perm[partner[i]] = t;
            }
        }
    free(perm);
    free(partner);
    return true;
}

/* ce_packed's and NCCL's send buffer: each destination's rows gathered in
 * order, a run of adjacent rows one copy. */
static bool pack(const struct a2a *A, int s)
{
    const struct a2a_gpu *G = &A->gpu[s];
    const size_t rb = A->row_bytes;
    for (int d = 0; d < A->n; d++) {
        if (d == s)
            continue;
        const uint32_t *p = a2a_pick(A, s, d);
        CUdeviceptr out = G->packed + a2a_packed_offset(A, s, d);
        for (size_t j = 0; j < A->k;) {
            size_t run = 1;
            while (j + run < A->k && p[j + run] == p[j] + run)
                run++;
            CU(tcu.cuMemcpyAsync(out + j * rb, G->src + (size_t)p[j] * rb, run * rb, G->main));
            j += run;
        }
    }
    return true;
fail:
    return false;
}

static void put(p2pt_copy_desc *out, const struct a2a *A, int s, int d, size_t j)
{
    const size_t rb = A->row_bytes;
    out->dst = bench_dptr(A->gpu[d].recv + a2a_recv_offset(A, s, d) + j * rb);
    out->src = bench_dptr(A->gpu[s].src + (size_t)a2a_pick(A, s, d)[j] * rb);
    out->bytes = rb;
}

/* GPU s's batch: its rows for every peer, peers taken from the next GPU on
 * (s + 1, s + 2, ...) so that the GPUs do not all begin with the same one.
 * By destination (--order dest): every row for one peer, then the next
 * peer's. By row (the default): a merge of the peers' ascending picks, so
 * that a source row sent to several peers is described for each of them
 * in turn, as a MoE dispatch walks its tokens. */
static void describe(const struct a2a *A, int s, bool by_dest)
{
    p2pt_copy_desc *out = A->gpu[s].hdescs;
    size_t next[A2A_MAX_GPUS] = {0}; /* by row: each peer's next pick */
    if (by_dest) {
        for (int i = 1; i < A->n; i++)
            for (size_t j = 0; j < A->k; j++)
                put(out++, A, s, (s + i) % A->n, j);
        return;
    }
    for (size_t left = A->count; left > 0; left--) {
        int best = -1;
        uint32_t row = 0;
        for (int i = 1; i < A->n; i++) {
            const int d = (s + i) % A->n;
            if (next[d] < A->k && (best < 0 || a2a_pick(A, s, d)[next[d]] < row)) {
                best = d;
                row = a2a_pick(A, s, d)[next[d]];
            }
        }
        put(out++, A, s, best, next[best]++);
    }
}

bool a2a_shape_open(struct a2a *A)
{
    const size_t src_bytes = A->rows * A->row_bytes;
    const size_t packed_bytes = (size_t)(A->n - 1) * A->k * A->row_bytes;
    const uint32_t count = (uint32_t)A->count;
    if (!make_picks(A))
        goto fail;
    for (int g = 0; g < A->n; g++) {
        struct a2a_gpu *G = &A->gpu[g];
        if (!bench_use(&G->g))
            goto fail;
        G->hdescs = malloc(A->count * sizeof(*G->hdescs));
        if (G->hdescs == NULL) {
            bench_set_err("out of host memory for %zu descriptors", A->count);
            goto fail;
        }
        CU(tcu.cuMemAlloc(&G->src, src_bytes));
        CU(tcu.cuMemAlloc(&G->packed, packed_bytes));
        CU(tcu.cuMemAlloc(&G->recv, A->recv_bytes));
        CU(tcu.cuMemAlloc(&G->ref, A->recv_bytes));
        CU(tcu.cuMemAlloc(&G->descs, A->count * sizeof(p2pt_copy_desc)));
        CU(tcu.cuMemAlloc(&G->count, sizeof(count)));
        CU(tcu.cuMemAlloc(&G->workspace, p2pt_batch_workspace_bytes(count)));
        if (!bench_fill(&G->g, G->src, src_bytes, G->pattern))
            goto fail;
    }
    /* Every buffer exists before any descriptor names one. */
    for (int g = 0; g < A->n; g++) {
        struct a2a_gpu *G = &A->gpu[g];
        if (!bench_use(&G->g) || !pack(A, g))
            goto fail;
        describe(A, g, A->by_dest);
        CU(tcu.cuMemcpyHtoD(G->descs, G->hdescs, A->count * sizeof(p2pt_copy_desc)));
        CU(tcu.cuMemcpyHtoD(G->count, &count, sizeof(count)));
        CU(tcu.cuCtxSynchronize());
    }
    return true;
fail:
    return false;
}

static void free_on(CUdeviceptr *p)
{
    if (*p == 0)
        return;
    CU_RELEASE(tcu.cuMemFree(*p));
    *p = 0;
}

void a2a_shape_close(struct a2a *A)
{
    for (int g = 0; g < A->n; g++) {
        struct a2a_gpu *G = &A->gpu[g];
        free(G->hdescs);
        G->hdescs = NULL;
        if (G->g.ctx == NULL)
            continue;
        CU_RELEASE(tcu.cuCtxSetCurrent(G->g.ctx));
        CU_RELEASE(tcu.cuCtxSynchronize());
        free_on(&G->src);
        free_on(&G->packed);
        free_on(&G->recv);
        free_on(&G->ref);
        free_on(&G->descs);
        free_on(&G->count);
        free_on(&G->workspace);
    }
    free(A->pick);
    A->pick = NULL;
}
