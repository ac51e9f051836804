/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TMA batch kernel (kernels/batch_copy.cu) at its edges, through host
 * and device descriptors alike: every (dst mod 16, src mod 16) pair at
 * sizes around every tile edge (the head, the 16-byte body, one tile, the
 * shuffled neighbour vector of a shifted piece, pieces around 2 and 4
 * KiB); pieces from 0 bytes to 64 MiB mixed in one batch (a large piece
 * spread over every CTA beside many small ones); 100,000 pieces (more descriptor blocks than CTAs); pinned
 * host memory as source or destination, inside registered windows and
 * not; a CTA cap down to one copying CTA, and caps that leave the last
 * blocks shared. Every byte of every destination
 * pool is checked, the gaps between pieces and the guards around the pool
 * included, after poisoning.
 */
#include "batch_test.h"

static p2pt_handle *tma_handle(const char *options)
{
    p2pt_init_args a = {sizeof(a), NULL, "tma", options};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&a, &h));
    return h;
}

/* Destinations one after another with `gap` bytes before each, at `dmod`
 * modulo 16; sources at `smod` modulo 16, consecutive. */
static size_t lay_pairs(p2pt_copy_desc *d, const struct gt_buf *dst, const struct gt_buf *src,
                        const uint64_t *sizes, size_t n_sizes)
{
    size_t n = 0, dat = 0, sat = 0;
    for (size_t k = 0; k < n_sizes; k++)
        for (unsigned dm = 0; dm < 16; dm++)
            for (unsigned sm = 0; sm < 16; sm++) {
                dat = (dat + 16 + 15) / 16 * 16 + dm; /* at least 16 bytes of gap */
                sat = (sat + 15) / 16 * 16 + sm;
                cr_assert_leq(dat + sizes[k], dst->n);
                if (sat + sizes[k] > src->n)
                    sat = sm;
                d[n].dst = (void *)(uintptr_t)(dst->ptr + dat);
                d[n].src = (const void *)(uintptr_t)(src->ptr + sat);
                d[n].bytes = sizes[k];
                dat += sizes[k];
                sat += sizes[k];
                n++;
            }
    return n;
}

Test(batch_kernel, every_alignment_pair_around_every_tile_edge)
{
    gt_require_gpus(1);
    gt_use_device(0);
    enum { T = P2PT_BATCH_TILE };
    /* Each size fills a descriptor block of its own (256 pairs): blocks of
     * pieces around 2 and 4 KiB too, the sizes that KV blocks and token rows
     * take most. */
    static const uint64_t sizes[] = {1,      15,     16,        17,         31,       33,
                                     255,    513,    2047,      2048,       2049,     2065,
                                     4095,   4096,   4097,      4113,       T - 1,    T,
                                     T + 1,  T + 15, T + 16,    T + 17,     2 * T - 1, 2 * T + 17,
                                     3 * T + 5};
    size_t total = 0;
    for (size_t k = 0; k < P2PT_ARRAY_LEN(sizes); k++)
        total += 256 * (sizes[k] + 48);
    struct gt_buf dst = gt_alloc(total), src = gt_alloc(total);
    gt_fill(&src, 11);
    p2pt_copy_desc *d = malloc(256 * P2PT_ARRAY_LEN(sizes) * sizeof(*d));
    cr_assert_not_null(d);
    size_t n = lay_pairs(d, &dst, &src, sizes, P2PT_ARRAY_LEN(sizes));
    p2pt_handle *h = tma_handle(NULL);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    bt_both_ways(h, 0, s, &dst, &src, d, n, "every (dst, src) alignment pair");
    /* One piece at a time too: a piece alone in its launch and block. */
    for (size_t i = 0; i < n; i += 97) {
        char what[96];
        snprintf(what, sizeof(what), "piece %zu alone (%llu bytes)", i,
                 (unsigned long long)d[i].bytes);
        gt_poison(&dst);
        GT_OK(p2pt_copy_batch_async(h, &d[i], 1, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        unsigned char *src_host = bt_host_copy(&src);
        bt_expect(&dst, &src, src_host, &d[i], 1, NULL, what);
        free(src_host);
    }
    tcu.cuStreamDestroy(s);
    p2pt_finalize(h);
    free(d);
    gt_free(&dst);
    gt_free(&src);
}

Test(batch_kernel, pieces_from_0_bytes_to_64_mib_mixed_in_one_batch)
{
    gt_require_gpus(1);
    gt_use_device(0);
    const size_t n = 600;
    struct bt_rng r = {0x5eed};
    p2pt_copy_desc *d = malloc(n * sizeof(*d));
    cr_assert_not_null(d);
    uint64_t sizes[600], total = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = bt_next(&r);
        sizes[i] = i == 3 ? 64ull << 20 : i == 400 ? (16ull << 20) + 7 : i % 50 == 0 ? (1ull << 20) + v % 4096
                   : i % 9 == 0 ? 0 : v % 20000;
        total += sizes[i] + 300;
    }
    struct gt_buf dst = gt_alloc(total + 4096), src = gt_alloc((64ull << 20) + 8192);
    gt_fill(&src, 12);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        at += 1 + bt_next(&r) % 299;
        size_t soff = (size_t)(bt_next(&r) % (src.n - sizes[i] + 1));
        d[i].dst = (void *)(uintptr_t)(dst.ptr + at);
        d[i].src = (const void *)(uintptr_t)(src.ptr + soff);
        d[i].bytes = sizes[i];
        at += sizes[i];
    }
    p2pt_handle *h = tma_handle(NULL);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    bt_both_ways(h, 0, s, &dst, &src, d, n, "0 B to 64 MiB mixed");
    tcu.cuStreamDestroy(s);
    p2pt_finalize(h);
    free(d);
    gt_free(&dst);
    gt_free(&src);
}

Test(batch_kernel, a_hundred_thousand_pieces)
{
    gt_require_gpus(1);
    gt_use_device(0);
    const size_t n = 100000;
    struct gt_buf dst = gt_alloc(bt_pool_bytes(n, 256)), src = gt_alloc(1u << 20);
    gt_fill(&src, 13);
    p2pt_copy_desc *d = malloc(n * sizeof(*d));
    cr_assert_not_null(d);
    cr_assert(bt_layout(d, n, &dst, &src, 256, 13));
    p2pt_handle *h = tma_handle(NULL);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    bt_both_ways(h, 0, s, &dst, &src, d, n, "100,000 pieces up to 256 bytes");
    tcu.cuStreamDestroy(s);
    p2pt_finalize(h);
    free(d);
    gt_free(&dst);
    gt_free(&src);
}

Test(batch_kernel, pinned_host_memory_on_either_side)
{
    gt_require_gpus(1);
    gt_use_device(0);
    const size_t n = 700;
    p2pt_copy_desc *d = malloc(n * sizeof(*d));
    cr_assert_not_null(d);
    p2pt_handle *h = tma_handle(NULL);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int host_side = 0; host_side < 2; host_side++) {
        struct gt_buf dst = host_side ? gt_alloc_host(bt_pool_bytes(n, 40000))
                                      : gt_alloc(bt_pool_bytes(n, 40000));
        struct gt_buf src = host_side ? gt_alloc(1u << 20) : gt_alloc_host(1u << 20);
        gt_fill(&src, 14 + (uint64_t)host_side);
        cr_assert(bt_layout(d, n, &dst, &src, 40000, 14));
        bt_both_ways(h, 0, s, &dst, &src, d, n,
                     host_side ? "device to pinned host memory" : "pinned host memory to device");
        gt_free(&dst);
        gt_free(&src);
    }
    tcu.cuStreamDestroy(s);
    p2pt_finalize(h);
    free(d);
}

Test(batch_kernel, a_cta_cap_down_to_one_is_still_byte_exact)
{
    gt_require_gpus(1);
    gt_use_device(0);
    const size_t n = 3000;
    struct gt_buf dst = gt_alloc(bt_pool_bytes(n, 70000)), src = gt_alloc(1u << 20);
    gt_fill(&src, 15);
    p2pt_copy_desc *d = malloc(n * sizeof(*d));
    cr_assert_not_null(d);
    cr_assert(bt_layout(d, n, &dst, &src, 70000, 15));
    /* 12 descriptor blocks: on 2, 3, 4, 6 or 12 copying CTAs whole blocks
     * each; on 5, 7, 8 or 9 a run of whole blocks each, then the last
     * 12 % G split among the CTAs; on 13 fewer blocks than CTAs. A grid
     * narrower than the SMs copies on every CTA, CTA 0 after the status
     * record in the last place (a cap of 1 launches the 2 CTAs a device
     * batch needs); the host batches copy on every CTA of the cap, 1 too. */
    static const char *const caps[] = {
        "P2P_TRANSPORT_MAX_CTAS=1", "P2P_TRANSPORT_MAX_CTAS=2", "P2P_TRANSPORT_MAX_CTAS=3",
        "P2P_TRANSPORT_MAX_CTAS=4", "P2P_TRANSPORT_MAX_CTAS=5", "P2P_TRANSPORT_MAX_CTAS=7",
        "P2P_TRANSPORT_MAX_CTAS=8", "P2P_TRANSPORT_MAX_CTAS=9", "P2P_TRANSPORT_MAX_CTAS=12",
        "P2P_TRANSPORT_MAX_CTAS=13"};
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (size_t c = 0; c < P2PT_ARRAY_LEN(caps); c++) {
        p2pt_handle *h = tma_handle(caps[c]);
        bt_both_ways(h, 0, s, &dst, &src, d, n, caps[c]);
        p2pt_finalize(h);
    }
    tcu.cuStreamDestroy(s);
    free(d);
    gt_free(&dst);
    gt_free(&src);
}
