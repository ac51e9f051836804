/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the batch tests: a refusal's status and text checked, a
 * handle made without a driver, random batches laid out in one source pool
 * and one destination pool, with poisoned gaps between the destinations,
 * random block mappings, and the check that the whole destination pool
 * holds exactly the pieces and poison everywhere else (every gap is a
 * guard), and the last launches the fake driver recorded.
 * Static inline so each test file stays self-contained.
 */
#ifndef P2PT_BATCH_TEST_H
#define P2PT_BATCH_TEST_H

#include <stddef.h>

#include "gpu_test.h"
#include "p2pt_kernel_abi.h"

/* Over the fake driver: the last device batch it launched, its entry's
 * name, its grid and its parameters up to the windows. */
static inline void bt_fake_last_batch_launch(char *name, size_t name_n, unsigned *grid,
                                             struct p2pt_batch_dev_params *head)
{
    void (*last)(char *, size_t, unsigned *, void *, size_t) =
        (void (*)(char *, size_t, unsigned *, void *, size_t))gt_fake_sym(
            "p2pt_fake_last_batch_launch");
    last(name, name_n, grid, head, offsetof(struct p2pt_batch_dev_params, window));
}

/* Over the fake driver: the last kernel it launched, its entry's name and
 * its grid. */
static inline void bt_fake_last_launch(char *name, size_t name_n, unsigned *grid)
{
    void (*last)(char *, size_t, unsigned *) =
        (void (*)(char *, size_t, unsigned *))gt_fake_sym("p2pt_fake_last_launch");
    last(name, name_n, grid);
}

/* `st` is `want` and the last error holds every one of `parts` (NULL-ended). */
static inline void bt_expect_refusal(p2pt_status st, p2pt_status want, const char *what,
                                     const char *const *parts)
{
    const char *msg = p2pt_last_error(NULL);
    cr_assert_eq(st, want, "%s (%s): status %d, expected %d: %s", what, parts[0], (int)st,
                 (int)want, msg);
    for (size_t i = 0; parts[i] != NULL; i++)
        cr_assert(strstr(msg, parts[i]) != NULL, "%s: \"%s\" lacks \"%s\"", what, msg, parts[i]);
}

#define BT_REFUSED(call, want, ...)                                                            \
    do {                                                                                       \
        const char *const parts_[] = {__VA_ARGS__, NULL};                                      \
        bt_expect_refusal((call), (want), #call, parts_);                                      \
    } while (0)

/* A handle made without a driver (`options` as p2pt_init_args carries them,
 * or NULL): for the refusals that come before one. */
static inline p2pt_handle *bt_cpu_handle(const char *transport, const char *options)
{
    struct p2pt_config cfg;
    cr_assert_eq(p2pt__config_read(&cfg, options, transport), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt__handle_new(&cfg, NULL, &h), P2PT_SUCCESS);
    return h;
}

struct bt_rng {
    uint64_t x;
};

static inline uint64_t bt_next(struct bt_rng *r)
{
    r->x ^= r->x << 13;
    r->x ^= r->x >> 7;
    r->x ^= r->x << 17;
    return r->x;
}

/* A piece size: one in eight empty, one in four below 64 bytes, the rest
 * up to `max`. */
static inline uint64_t bt_size(struct bt_rng *r, uint64_t max)
{
    uint64_t v = bt_next(r);
    if (v % 8 == 0)
        return 0;
    if (v % 4 == 1)
        return bt_next(r) % 64;
    return bt_next(r) % (max + 1);
}

/*
 * Lay out `n` random pieces: destinations one after another in `dst` with a
 * random gap of 1..300 bytes before each (guards), sources anywhere in
 * `src` (so some pieces share source bytes), offsets random, so pieces are
 * co-aligned or not at random. Returns false when the pool is too small.
 */
static inline bool bt_layout(p2pt_copy_desc *d, size_t n, const struct gt_buf *dst,
                             const struct gt_buf *src, uint64_t max, uint64_t seed)
{
    struct bt_rng r = {seed * 0x9E3779B97F4A7C15ull + 7};
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = bt_size(&r, max);
        if (bytes > src->n)
            bytes = src->n;
        at += 1 + bt_next(&r) % 300;
        if (at + bytes > dst->n)
            return false;
        size_t soff = (size_t)(bt_next(&r) % (src->n - bytes + 1));
        d[i].dst = (void *)(uintptr_t)(dst->ptr + at);
        d[i].src = (const void *)(uintptr_t)(src->ptr + soff);
        d[i].bytes = bytes;
        at += bytes;
    }
    return true;
}

/* `pairs` mapping rows: distinct random ids of [0, n_src) and of [0, n_dst).
 * `stream` picks the generator's stream: each file passes its own, so its
 * seeds give the mappings they always gave. */
static inline void bt_random_map(int64_t *map, size_t pairs, size_t n_src, size_t n_dst,
                                 uint64_t seed, uint64_t stream)
{
    struct bt_rng r = {seed * 0x9E3779B97F4A7C15ull + stream};
    for (int col = 0; col < 2; col++) {
        const size_t n = col == 0 ? n_src : n_dst;
        int64_t *perm = malloc(n * sizeof(*perm));
        cr_assert_not_null(perm);
        for (size_t i = 0; i < n; i++)
            perm[i] = (int64_t)i;
        for (size_t i = n - 1; i > 0; i--) {
            const size_t j = bt_next(&r) % (i + 1);
            const int64_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (size_t i = 0; i < pairs; i++)
            map[2 * i + col] = perm[i];
        free(perm);
    }
}

/* Bytes of destination pool `bt_layout` needs at most. */
static inline size_t bt_pool_bytes(size_t n, uint64_t max)
{
    return n * (301 + (size_t)max) + 4096;
}

/* The whole destination pool, guards included, must be poison except
 * where a piece with `ok[i]` (NULL: all) was copied from `src_host`. */
static inline void bt_expect(const struct gt_buf *dst, const struct gt_buf *src,
                             const unsigned char *src_host, const p2pt_copy_desc *d, size_t n,
                             const bool *ok, const char *what)
{
    size_t total = dst->n + 2 * GT_GUARD;
    unsigned char *want = malloc(total), *got = malloc(total);
    cr_assert(want && got);
    memset(want, GT_POISON, total);
    for (size_t i = 0; i < n; i++) {
        if (ok != NULL && !ok[i])
            continue;
        size_t doff = (size_t)((uintptr_t)d[i].dst - dst->base);
        size_t soff = (size_t)((uintptr_t)d[i].src - src->ptr);
        memcpy(want + doff, src_host + soff, (size_t)d[i].bytes);
    }
    gt_read(dst, got, dst->base, total);
    for (size_t k = 0; k < total; k++) {
        if (got[k] == want[k])
            continue;
        /* Name the piece the byte belongs to, or the gap it lies in. */
        long piece = -1;
        for (size_t i = 0; i < n && piece < 0; i++) {
            size_t doff = (size_t)((uintptr_t)d[i].dst - dst->base);
            if (k >= doff && k < doff + d[i].bytes)
                piece = (long)i;
        }
        unsigned g = got[k], w = want[k];
        free(want);
        free(got);
        if (piece >= 0)
            cr_assert_fail("%s: piece %ld (%llu bytes, dst %% 16 = %u, src %% 16 = %u) byte %zu "
                           "is 0x%02x, expected 0x%02x",
                           what, piece, (unsigned long long)d[piece].bytes,
                           (unsigned)((uintptr_t)d[piece].dst % 16),
                           (unsigned)((uintptr_t)d[piece].src % 16),
                           k - (size_t)((uintptr_t)d[piece].dst - dst->base), g, w);
        cr_assert_fail("%s: byte %zu of the destination pool, outside every copied piece, is "
                       "0x%02x, expected poison 0x%02x",
                       what, k, g, w);
    }
    free(want);
    free(got);
}

/* The source pool's bytes on the host. */
static inline unsigned char *bt_host_copy(const struct gt_buf *b)
{
    unsigned char *h = malloc(b->n);
    cr_assert_not_null(h);
    gt_read(b, h, b->ptr, b->n);
    return h;
}

/* Run `d` (n pieces) as a host batch through `h`, then poison the
 * destination and run it again as a device batch (windows registered over
 * both pools for the stream's device, `dev`), checking both. */
static inline void bt_both_ways(p2pt_handle *h, int dev, CUstream s, struct gt_buf *dst,
                                struct gt_buf *src, const p2pt_copy_desc *d, size_t n,
                                const char *what)
{
    char label[160];
    unsigned char *src_host = bt_host_copy(src);
    gt_poison(dst);
    GT_OK(p2pt_copy_batch_async(h, d, n, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    snprintf(label, sizeof(label), "%s, host descriptors", what);
    bt_expect(dst, src, src_host, d, n, NULL, label);

    gt_poison(dst);
    CUdeviceptr descs, count, ws;
    uint32_t n32 = (uint32_t)n;
    GT_CHECK(tcu.cuMemAlloc(&descs, n * sizeof(*d)));
    GT_CHECK(tcu.cuMemAlloc(&count, 4));
    GT_CHECK(tcu.cuMemAlloc(&ws, p2pt_batch_workspace_bytes(n32)));
    GT_CHECK(tcu.cuMemcpyHtoD(descs, d, n * sizeof(*d)));
    GT_CHECK(tcu.cuMemcpyHtoD(count, &n32, 4));
    GT_OK(p2pt_window_register(h, dev, (void *)(uintptr_t)dst->base, dst->n + 2 * GT_GUARD));
    GT_OK(p2pt_window_register(h, dev, (void *)(uintptr_t)src->base, src->n + 2 * GT_GUARD));
    GT_OK(p2pt_copy_batch_device_async(h, (const p2pt_copy_desc *)(uintptr_t)descs,
                                       (const uint32_t *)(uintptr_t)count, n32,
                                       (void *)(uintptr_t)ws, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    p2pt_batch_status st;
    GT_CHECK(tcu.cuMemcpyDtoH(&st, ws, sizeof(st)));
    cr_assert_eq(st.count, n32, "%s: status count %u", what, st.count);
    cr_assert_eq(st.skipped, 0u, "%s: %u skipped (first %u, reasons %#x)", what, st.skipped,
                 st.first_bad, st.reasons);
    cr_assert_eq(st.copied, n32);
    cr_assert_eq(st.first_bad, UINT32_MAX);
    snprintf(label, sizeof(label), "%s, device descriptors", what);
    bt_expect(dst, src, src_host, d, n, NULL, label);
    GT_OK(p2pt_window_unregister(h, dev, (void *)(uintptr_t)dst->base));
    GT_OK(p2pt_window_unregister(h, dev, (void *)(uintptr_t)src->base));
    tcu.cuMemFree(descs);
    tcu.cuMemFree(count);
    tcu.cuMemFree(ws);
    free(src_host);
}

#endif
