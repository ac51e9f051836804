/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Whether an alltoall way delivered what it should and nothing else.
 * ce_packed's receive buffers (the reference) are read back once per shape
 * and compared on the host with the source rows they must hold, known from
 * the source pattern and the picks, and their guards with the poison.
 * Every other way's receive buffers are then compared with the reference
 * on their own GPU, every byte guards included, by a small kernel, so that
 * a way's check reads back one word per GPU, not its gigabytes; once per
 * shape that kernel must see a poisoned buffer differ from the reference,
 * so its "same" cannot come from a kernel that did nothing. A difference is reported after the row and counted, never
 * fatal; a CUDA error is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alltoall.h"

#define READ_CHUNK (64 * MiB) /* host buffer of the reference's read-back */
#define DIFF_THREADS 256
#define NONE UINT64_MAX

/* The first 16-byte unit where a and b differ, by atomicMin. */
static const char diff_source[] =
    "extern \"C\" __global__ void a2a_first_diff(const uint4 *a, const uint4 *b,\n"
    "                                            unsigned long long n, unsigned long long *first)\n"
    "{\n"
    "    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;\n"
    "    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "         i < n; i += stride) {\n"
    "        uint4 x = a[i], y = b[i];\n"
    "        if (x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w)\n"
    "            atomicMin(first, i);\n"
    "    }\n"
    "}\n";

bool a2a_check_load(struct a2a *A)
{
    struct bench_cubin kept = {0};
    for (int g = 0; g < A->n; g++) {
        struct a2a_gpu *G = &A->gpu[g];
        if (!bench_jit_load(diff_source, "a2a_first_diff", "the compare kernel", &G->g, &kept,
                            &G->diff_mod, &G->diff_fn))
            goto fail;
        CU(tcu.cuMemAlloc(&G->diff_first, sizeof(uint64_t)));
    }
    bench_cubin_free(&kept);
    return true;
fail:
    bench_cubin_free(&kept);
    return false;
}

void a2a_check_unload(struct a2a *A)
{
    for (int g = 0; g < A->n; g++) {
        struct a2a_gpu *G = &A->gpu[g];
        if (G->g.ctx == NULL)
            continue;
        CU_RELEASE(tcu.cuCtxSetCurrent(G->g.ctx));
        if (G->diff_mod)
            CU_RELEASE(tcu.cuModuleUnload(G->diff_mod));
        if (G->diff_first)
            CU_RELEASE(tcu.cuMemFree(G->diff_first));
        G->diff_mod = NULL;
        G->diff_first = 0;
    }
}

bool a2a_poison(struct a2a *A, bool ref)
{
    for (int g = 0; g < A->n; g++) {
        struct a2a_gpu *G = &A->gpu[g];
        if (!bench_use(&G->g))
            goto fail;
        CU(tcu.cuMemsetD8(ref ? G->ref : G->recv, BENCH_POISON, A->recv_bytes));
        CU(tcu.cuMemsetD8(G->workspace, 0xFF, sizeof(p2pt_batch_status)));
        /* The memsets are on the legacy stream, which the streams of the
         * rounds do not wait for: the context does. */
        CU(tcu.cuCtxSynchronize());
    }
    return true;
fail:
    return false;
}

/* Where byte `off` of GPU d's receive buffer lies, in words. */
static void describe_offset(const struct a2a *A, int d, size_t off, char *buf, size_t len)
{
    size_t r = off / A->region, within = off % A->region, rows = A->k * A->row_bytes;
    int s = (int)r >= d ? (int)r + 1 : (int)r;
    if (within >= rows)
        snprintf(buf, len, "byte %zu of the %d guard bytes after GPU %d's rows", within - rows,
                 A2A_GUARD, s);
    else
        snprintf(buf, len, "byte %zu of row %zu of %zu from GPU %d (its source row %u)",
                 within % A->row_bytes, within / A->row_bytes, A->k, s,
                 a2a_pick(A, s, d)[within / A->row_bytes]);
}

/* `n` bytes read back against source bytes [off, off + n) of a pattern;
 * the index of the first that differs, or n. */
static size_t pattern_mismatch(const unsigned char *got, const unsigned char *pat, size_t off,
                               size_t n)
{
    for (size_t done = 0; done < n;) {
        size_t o = (off + done) % BENCH_PATTERN_PERIOD, m = BENCH_PATTERN_PERIOD - o;
        if (m > n - done)
            m = n - done;
        if (memcmp(got + done, pat + o, m) != 0)
            for (size_t i = 0; i < m; i++)
                if (got[done + i] != pat[o + i])
                    return done + i;
        done += m;
    }
    return n;
}

/* One source's region of d's reference against the rows it must hold. */
static bool verify_region(struct a2a *A, int s, int d, unsigned char *buf, size_t chunk_rows,
                          const char *label, bool *ok)
{
    const size_t rb = A->row_bytes, base = a2a_recv_offset(A, s, d);
    const uint32_t *p = a2a_pick(A, s, d);
    const unsigned char *pat = A->gpu[s].pattern;
    char where[160];
    for (size_t j = 0; j < A->k; j += chunk_rows) {
        size_t n = A->k - j < chunk_rows ? A->k - j : chunk_rows;
        CU(tcu.cuMemcpyDtoH(buf, A->gpu[d].ref + base + j * rb, n * rb));
        for (size_t i = 0; i < n; i++) {
            size_t at = pattern_mismatch(buf + i * rb, pat, (size_t)p[j + i] * rb, rb);
            if (at < rb) {
                describe_offset(A, d, base + (j + i) * rb + at, where, sizeof(where));
                bench_row_check_failed("%s: GPU %d received %s as 0x%02x, not its source's "
                                       "0x%02x",
                                       label, d, where, buf[i * rb + at],
                                       pat[((size_t)p[j + i] * rb + at) % BENCH_PATTERN_PERIOD]);
                *ok = false;
                return true;
            }
        }
    }
    CU(tcu.cuMemcpyDtoH(buf, A->gpu[d].ref + base + A->k * rb, A2A_GUARD));
    for (size_t i = 0; i < A2A_GUARD; i++)
        if (buf[i] != BENCH_POISON) {
            describe_offset(A, d, base + A->k * rb + i, where, sizeof(where));
            bench_row_check_failed("%s: GPU %d's %s was written (0x%02x)", label, d, where,
                                   buf[i]);
            *ok = false;
            return true;
        }
    return true;
fail:
    return false;
}

bool a2a_verify_reference(struct a2a *A, const char *label, bool *ok)
{
    size_t chunk_rows = READ_CHUNK / A->row_bytes;
    if (chunk_rows == 0)
        chunk_rows = 1;
    size_t bytes = chunk_rows * A->row_bytes;
    unsigned char *buf = malloc(bytes > A2A_GUARD ? bytes : A2A_GUARD);
    *ok = true;
    if (buf == NULL) {
        bench_set_err("out of host memory (%zu bytes) for the check", bytes);
        return false;
    }
    for (int d = 0; d < A->n && *ok; d++) {
        if (!bench_use(&A->gpu[d].g))
            goto fail;
        for (int s = 0; s < A->n && *ok; s++)
            if (s != d && !verify_region(A, s, d, buf, chunk_rows, label, ok))
                goto fail;
    }
    free(buf);
    return true;
fail:
    free(buf);
    return false;
}

/* The compare kernel over GPU g's recv and ref: the first 16-byte unit
 * that differs, or NONE. */
static bool first_diff(const struct a2a *A, int g, uint64_t *first)
{
    const struct a2a_gpu *G = &A->gpu[g];
    unsigned long long units = A->recv_bytes / 16;
    CUdeviceptr a = G->recv, b = G->ref, out = G->diff_first;
    void *params[] = {&a, &b, &units, &out};
    if (!bench_use(&G->g))
        goto fail;
    CU(tcu.cuMemsetD8(G->diff_first, 0xFF, sizeof(uint64_t)));
    CU(tcu.cuCtxSynchronize());
    CU(tcu.cuLaunchKernel(G->diff_fn, (unsigned)G->g.sms * 4, 1, 1, DIFF_THREADS, 1, 1, 0,
                          G->main, params, NULL));
    CU(tcu.cuStreamSynchronize(G->main));
    CU(tcu.cuMemcpyDtoH(first, G->diff_first, sizeof(*first)));
    return true;
fail:
    return false;
}

bool a2a_compare_can_fail(struct a2a *A, const char *label, bool *ok)
{
    *ok = true;
    for (int g = 0; g < A->n; g++) {
        uint64_t first = NONE;
        if (!first_diff(A, g, &first))
            return false;
        if (first != 0) {
            char seen[64] = "no difference";
            if (first != NONE)
                snprintf(seen, sizeof(seen), "the first difference at byte %llu",
                         (unsigned long long)first * 16);
            bench_row_check_failed("%s: on GPU %d the compare kernel saw %s between the "
                                   "poisoned receive buffer and ce_packed's, not one at byte 0: "
                                   "its answers would prove nothing",
                                   label, g, seen);
            *ok = false;
            return true;
        }
    }
    return true;
}

bool a2a_compare_reference(struct a2a *A, const char *label, bool *ok)
{
    *ok = true;
    for (int g = 0; g < A->n; g++) {
        uint64_t first = NONE;
        if (!first_diff(A, g, &first))
            return false;
        if (first == NONE)
            continue;
        const struct a2a_gpu *G = &A->gpu[g];
        unsigned char got[16], want[16];
        size_t at = (size_t)first * 16, i = 0;
        CU(tcu.cuMemcpyDtoH(got, G->recv + at, sizeof(got)));
        CU(tcu.cuMemcpyDtoH(want, G->ref + at, sizeof(want)));
        while (i < 15 && got[i] == want[i])
            i++;
        char where[160];
        describe_offset(A, g, at + i, where, sizeof(where));
        bench_row_check_failed("%s: GPU %d received %s as 0x%02x, ce_packed 0x%02x", label, g,
                               where, got[i], want[i]);
        *ok = false;
        return true;
    }
    return true;
fail:
    return false;
}

bool a2a_check_batch_status(struct a2a *A, const char *label, bool *ok)
{
    *ok = true;
    for (int g = 0; g < A->n && *ok; g++) {
        char whose[32];
        snprintf(whose, sizeof(whose), "GPU %d's", g);
        if (!bench_use(&A->gpu[g].g) ||
            !bench_check_batch_status(A->gpu[g].workspace, A->count, label, whose, ok))
            return false;
    }
    return true;
}
