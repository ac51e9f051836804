/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Copies on one GPU through the transport the environment selects
 * (P2P_TRANSPORT; the GPU runs use the binary once with "ce", once with
 * "tma"): random data, poisoned destination, guard bytes on both sides, every
 * size from 0 and 1 byte to 64 MiB + 5 at co-aligned and non-co-aligned odd
 * offsets; several streams at once; argument errors with a live handle.
 */
#include "gpu_test.h"

static const size_t sizes[] = {1, 15, 16, 17, 4095, 4096 + 3, 48 * 1024 - 1, 48 * 1024,
                               48 * 1024 + 1, 1024 * 1024 + 7, 64u * 1024 * 1024 + 5};
static const size_t offsets[][2] = {{0, 0}, {3, 3}, {13, 13}, {16, 48}, {1, 2}, {5, 0}, {7, 23}};

Test(copy, every_size_and_offset_is_byte_exact_with_guards_intact)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle(NULL);
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    uint64_t seed = 1;
    for (size_t i = 0; i < P2PT_ARRAY_LEN(sizes); i++) {
        /* Buffers sized to the case, so the guard check covers the bytes
         * right around the copy without reading back 64 MiB every time. */
        struct gt_buf src = gt_alloc(sizes[i] + 64), dst = gt_alloc(sizes[i] + 64);
        for (size_t o = 0; o < P2PT_ARRAY_LEN(offsets); o++) {
            size_t n = sizes[i], so = offsets[o][0], dof = offsets[o][1];
            gt_fill(&src, seed++);
            gt_poison(&dst);
            GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + dof), (void *)(src.ptr + so), n, s));
            GT_CHECK(tcu.cuStreamSynchronize(s));
            char what[96];
            snprintf(what, sizeof(what), "%s, src+%zu -> dst+%zu", p.transport, so, dof);
            gt_expect_range(&dst, dof, &src, so, n, what);
        }
        gt_free(&src);
        gt_free(&dst);
    }
    tcu.cuStreamDestroy(s);
    p2pt_finalize(h);
}

Test(copy, zero_bytes_succeeds_and_touches_nothing)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle(NULL);
    struct gt_buf src = gt_alloc(64), dst = gt_alloc(64);
    gt_fill(&src, 3);
    GT_OK(p2pt_copy_async(h, (void *)dst.ptr, (void *)src.ptr, 0, NULL));
    GT_OK(p2pt_copy_async(h, NULL, NULL, 0, NULL));
    GT_CHECK(tcu.cuCtxSynchronize());
    gt_expect_range(&dst, 0, &src, 0, 0, "zero-byte copy");
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.copies, 0, "a zero-byte copy was counted: %llu", (unsigned long long)p.copies);
    gt_free(&src);
    gt_free(&dst);
    p2pt_finalize(h);
}

#define N_STREAMS 4
#define PER_STREAM 8

Test(copy, several_streams_copy_at_once)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle(NULL);
    CUstream s[N_STREAMS];
    struct gt_buf src[N_STREAMS][PER_STREAM], dst[N_STREAMS][PER_STREAM];
    for (int i = 0; i < N_STREAMS; i++) {
        GT_CHECK(tcu.cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
        for (int j = 0; j < PER_STREAM; j++) {
            size_t n = 300000 + (size_t)(i * PER_STREAM + j) * 4099;
            src[i][j] = gt_alloc(n);
            dst[i][j] = gt_alloc(n);
            gt_fill(&src[i][j], (uint64_t)(i * 100 + j + 1));
        }
    }
    for (int j = 0; j < PER_STREAM; j++)
        for (int i = 0; i < N_STREAMS; i++)
            GT_OK(p2pt_copy_async(h, (void *)dst[i][j].ptr, (void *)src[i][j].ptr,
                                  src[i][j].n, s[i]));
    for (int i = 0; i < N_STREAMS; i++)
        GT_CHECK(tcu.cuStreamSynchronize(s[i]));
    for (int i = 0; i < N_STREAMS; i++) {
        for (int j = 0; j < PER_STREAM; j++) {
            gt_expect_range(&dst[i][j], 0, &src[i][j], 0, src[i][j].n, "multi-stream");
            gt_free(&src[i][j]);
            gt_free(&dst[i][j]);
        }
        tcu.cuStreamDestroy(s[i]);
    }
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.copies, N_STREAMS * PER_STREAM);
    p2pt_finalize(h);
}

Test(copy, bad_arguments_with_a_live_handle_get_status_4_and_the_values)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle(NULL);
    struct gt_buf b = gt_alloc(1 << 20);
    void *base = (void *)b.ptr;
    p2pt_status st = p2pt_copy_async(h, (char *)base + 100, base, 4096, NULL);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "overlap -> %d", (int)st);
    cr_assert(strstr(p2pt_last_error(NULL), "overlapping") != NULL, "%s", p2pt_last_error(NULL));
    cr_assert_eq(p2pt_copy_async(h, NULL, base, 16, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p2pt_copy_async(h, base, NULL, 16, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p2pt_copy_async(h, (void *)(UINTPTR_MAX - 8), base, 64, NULL),
                 P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "wraps") != NULL, "%s", p2pt_last_error(NULL));
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.rejected, 4, "rejections counted: %llu", (unsigned long long)p.rejected);
    cr_assert_eq(p.copies, 0);
    gt_free(&b);
    GT_OK(p2pt_finalize(h));
    GT_OK(p2pt_finalize(h)); /* safe twice */
    cr_assert_eq(p2pt_copy_async(NULL, base, base, 16, NULL), P2PT_INVALID_ARGUMENT);
}

Test(copy, counters_advance_by_copies_and_bytes)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle(NULL);
    struct gt_buf src = gt_alloc(1 << 20), dst = gt_alloc(1 << 20);
    for (int i = 0; i < 5; i++)
        GT_OK(p2pt_copy_async(h, (void *)dst.ptr, (void *)src.ptr, 1000 + (size_t)i, NULL));
    GT_CHECK(tcu.cuCtxSynchronize());
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.copies, 5);
    cr_assert_eq(p.bytes, 5 * 1000 + 10);
    /* An older, shorter struct is filled only as far as its size says. */
    p2pt_properties small;
    memset(&small, 0x5A, sizeof(small));
    small.size = offsetof(p2pt_properties, driver_version);
    GT_OK(p2pt_get_properties(h, &small));
    cr_assert_str_eq(small.transport, p.transport);
    cr_assert_eq(small.driver_version, 0x5A5A5A5A, "wrote past the caller's size");
    gt_free(&src);
    gt_free(&dst);
    p2pt_finalize(h);
}
