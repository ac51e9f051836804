/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Block layouts (p2pt_block_layout_create, _check, _swap, _destroy): a
 * cache's layers checked once, then mappings swapped on them. It proves:
 *   - on any machine, with no driver: bad layers are refused naming the
 *     layer and nothing is made; a layout copies its records (the caller's
 *     array is free at once); a mapping's refusals name the cell and the
 *     range of ids, or the rows that race, on layers apart and on layers
 *     that share bytes; a layout serves mapping after mapping; its record
 *     counts every piece; destroy takes NULL and refuses what is not a
 *     layout; every bad argument of a swap is refused before the driver;
 *     the plugin table has the four slots;
 *   - over the fake driver: a host mapping lands every block where it says
 *     as one host batch and writes the record, a refused one enqueues
 *     nothing; a GPU mapping is one device batch whose grid the built-in
 *     link CTAs cap where every piece crosses the host link (3 to the host,
 *     8 to the GPU), under a budget the budget, GPU to GPU not at all; the
 *     layers are located at the first such swap only;
 *   - on a GPU (skipped without one, with the reason): offload and restore
 *     through host and GPU mappings land every byte and nothing else, the
 *     record of each; the grids across the host link; a captured swap of a
 *     GPU mapping replays with new rows.
 */
#include <stddef.h>

#include "batch_test.h"
#include "p2pt_kernel_abi.h"
#include "p2pt_plugin.h"

#define CREATE "p2pt_block_layout_create"
#define CHECK "p2pt_block_layout_check"
#define SWAP "p2pt_block_layout_swap"

static p2pt_block_layer layer(uintptr_t dst, uintptr_t src, uint64_t bb, uint64_t dst_blocks,
                              uint64_t src_blocks)
{
    p2pt_block_layer l = {sizeof(l), (void *)dst, (const void *)src, bb, dst_blocks, src_blocks};
    return l;
}

static p2pt_block_layout *made(const p2pt_block_layer *ls, size_t n)
{
    p2pt_block_layout *lay = NULL;
    GT_OK(p2pt_block_layout_create(ls, n, &lay));
    cr_assert_not_null(lay);
    return lay;
}

static void expect_done(const p2pt_batch_status *r, uint32_t pieces, const char *what)
{
    cr_assert_eq(r->count, pieces, "%s: count %u", what, r->count);
    cr_assert_eq(r->copied, pieces, "%s: copied %u", what, r->copied);
    cr_assert_eq(r->skipped, 0u, "%s: skipped %u", what, r->skipped);
    cr_assert_eq(r->first_bad, UINT32_MAX, "%s: first_bad %u", what, r->first_bad);
    cr_assert_eq(r->reasons, 0u, "%s: reasons %u", what, r->reasons);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(r->reserved[k], 0u, "%s: reserved[%d] %u", what, k, r->reserved[k]);
}

/* ------------------------------------------------------------- layouts */

Test(block_layout, bad_layers_are_refused_naming_the_layer_and_nothing_is_made)
{
    p2pt_block_layer ls[3];
    for (int l = 0; l < 3; l++)
        ls[l] = layer(0x100000 + 0x10000 * l, 0x900000 + 0x10000 * l, 64, 16, 8);
    p2pt_block_layout *lay = (p2pt_block_layout *)(uintptr_t)1;

    BT_REFUSED(p2pt_block_layout_create(ls, 3, NULL), P2PT_INVALID_ARGUMENT,
               CREATE ": out is NULL");
    BT_REFUSED(p2pt_block_layout_create(NULL, 3, &lay), P2PT_INVALID_ARGUMENT,
               CREATE ": layers (nil), n_layers 3", "at least one p2pt_block_layer");
    cr_assert_null(lay, "a refusal leaves *out NULL");
    BT_REFUSED(p2pt_block_layout_create(ls, 0, &lay), P2PT_INVALID_ARGUMENT, "n_layers 0");
    ls[0].size = 8;
    BT_REFUSED(p2pt_block_layout_create(ls, 3, &lay), P2PT_INVALID_ARGUMENT,
               CREATE ": layers[0].size is 8", "sizeof(p2pt_block_layer)");
    ls[0].size = sizeof(ls[0]);
    ls[2].size = sizeof(ls[0]) + 8;
    BT_REFUSED(p2pt_block_layout_create(ls, 3, &lay), P2PT_INVALID_ARGUMENT,
               CREATE ": layer 2: size");
    ls[2].size = sizeof(ls[0]);
    ls[1].src = (const void *)(uintptr_t)(UINTPTR_MAX - 100);
    BT_REFUSED(p2pt_block_layout_create(ls, 3, &lay), P2PT_INVALID_ARGUMENT,
               CREATE ": layer 1: 8 src blocks of 64 bytes", "past the end of the address space");
    ls[1].src = NULL;
    BT_REFUSED(p2pt_block_layout_create(ls, 3, &lay), P2PT_INVALID_ARGUMENT,
               CREATE ": layer 1: src is NULL with 8 blocks");
    cr_assert_null(lay);
    /* The same words as the call that takes layers afresh. */
    const int64_t map[2] = {0, 0};
    cr_assert_eq(p2pt_copy_blocks_async((p2pt_handle *)(uintptr_t)1, ls, 3, map, 1, NULL),
                 P2PT_INVALID_USAGE, "a handle that is not live is refused first");
    struct p2pt_block_pieces p;
    cr_assert_eq(p2pt__block_plan("x", ls, 3, map, 1, &p), P2PT_INVALID_ARGUMENT);
    char plan_msg[512];
    snprintf(plan_msg, sizeof(plan_msg), "%s", p2pt_last_error(NULL));
    cr_assert_eq(p2pt_block_layout_create(ls, 3, &lay), P2PT_INVALID_ARGUMENT);
    cr_assert_str_eq(strstr(p2pt_last_error(NULL), ": layer"), strstr(plan_msg, ": layer"));
}

Test(block_layout, a_layout_keeps_its_own_copy_of_longer_records)
{
    /* Records of a newer caller: longer than this build's, read at their
     * stride; the layout keeps the fields it knows. */
    struct longer {
        p2pt_block_layer l;
        uint64_t newer_field;
    } ls[2];
    for (int l = 0; l < 2; l++) {
        ls[l].l = layer(0x100000 + 0x10000 * l, 0x900000 + 0x10000 * l, 64, 16, 8);
        ls[l].l.size = sizeof(ls[l]);
        ls[l].newer_field = 0xEEEEEEEEu;
    }
    p2pt_block_layout *lay = made(&ls[0].l, 2);
    memset(ls, 0xEE, sizeof(ls)); /* free as soon as the call returned */
    const int64_t good[4] = {7, 15, 0, 0};
    p2pt_batch_status rec;
    GT_OK(p2pt_block_layout_check(lay, good, 2, &rec));
    expect_done(&rec, 4, "2 layers x 2 rows");
    const int64_t bad[2] = {8, 0};
    BT_REFUSED(p2pt_block_layout_check(lay, bad, 1, NULL), P2PT_INVALID_ARGUMENT,
               CHECK ": block_mapping[0, 0] = 8: src block ids must be in [0, 8)");
    GT_OK(p2pt_block_layout_destroy(lay));
}

Test(block_layout, a_mapping_is_refused_by_its_cell_and_the_range_of_ids)
{
    p2pt_block_layer ls[2] = {layer(0x100000, 0x900000, 64, 6, 4),
                              layer(0x200000, 0xA00000, 64, 6, 3)};
    p2pt_block_layout *lay = made(ls, 2);
    const int64_t src_high[4] = {1, 1, 3, 0}, src_neg[4] = {1, 1, -1, 0},
                  dst_high[4] = {1, 1, 0, 6}, dst_neg[4] = {1, 1, 0, -3};
    BT_REFUSED(p2pt_block_layout_check(lay, src_high, 2, NULL), P2PT_INVALID_ARGUMENT,
               CHECK ": block_mapping[1, 0] = 3: src block ids must be in [0, 3) (src[1] has 3 "
                     "blocks)");
    BT_REFUSED(p2pt_block_layout_check(lay, src_neg, 2, NULL), P2PT_INVALID_ARGUMENT,
               "block_mapping[1, 0] = -1: src block ids must be in [0, 3)");
    BT_REFUSED(p2pt_block_layout_check(lay, dst_high, 2, NULL), P2PT_INVALID_ARGUMENT,
               "block_mapping[1, 1] = 6: dst block ids must be in [0, 6) (dst[0] has 6 blocks)");
    BT_REFUSED(p2pt_block_layout_check(lay, dst_neg, 2, NULL), P2PT_INVALID_ARGUMENT,
               "block_mapping[1, 1] = -3: dst block ids");
    const int64_t twice[6] = {0, 1, 2, 4, 1, 1};
    BT_REFUSED(p2pt_block_layout_check(lay, twice, 3, NULL), P2PT_INVALID_ARGUMENT,
               "rows 0 and 2 both write dst block 1", "each destination block may appear once");
    BT_REFUSED(p2pt_block_layout_check(lay, NULL, 2, NULL), P2PT_INVALID_ARGUMENT,
               "mapping (nil) with 2 pairs");
    BT_REFUSED(p2pt_block_layout_check(NULL, twice, 1, NULL), P2PT_INVALID_ARGUMENT,
               CHECK ": layout is NULL");
    /* The layout serves mapping after mapping, a refusal in between. */
    p2pt_batch_status rec;
    memset(&rec, 0x5A, sizeof(rec));
    const int64_t ok1[4] = {0, 5, 2, 0}, ok2[2] = {1, 3};
    GT_OK(p2pt_block_layout_check(lay, ok1, 2, &rec));
    expect_done(&rec, 4, "2 rows");
    GT_OK(p2pt_block_layout_check(lay, ok2, 1, &rec));
    expect_done(&rec, 2, "1 row");
    GT_OK(p2pt_block_layout_check(lay, NULL, 0, &rec));
    expect_done(&rec, 0, "no row");
    GT_OK(p2pt_block_layout_check(lay, ok1, 2, NULL));
    GT_OK(p2pt_block_layout_destroy(lay));
}

Test(block_layout, layers_that_share_bytes_are_checked_by_address)
{
    /* One array as both sides: a block may not be read and written. */
    p2pt_block_layer same = layer(0x100000, 0x100000, 64, 8, 8);
    p2pt_block_layout *lay = made(&same, 1);
    const int64_t chain[4] = {1, 2, 2, 3}, apart[4] = {1, 2, 3, 4};
    BT_REFUSED(p2pt_block_layout_check(lay, chain, 2, NULL), P2PT_INVALID_ARGUMENT,
               "both a source and a destination");
    GT_OK(p2pt_block_layout_check(lay, apart, 2, NULL));
    GT_OK(p2pt_block_layout_destroy(lay));
    /* Two layers of a [blocks, layers, ...] array: padded blocks interleave. */
    p2pt_block_layer two[2] = {layer(0x100000, 0x900000, 64, 4, 4),
                               layer(0x100020, 0x900020, 64, 4, 4)};
    lay = made(two, 2);
    const int64_t one[2] = {0, 1};
    BT_REFUSED(p2pt_block_layout_check(lay, one, 1, NULL), P2PT_INVALID_ARGUMENT,
               "pieces write the same bytes");
    GT_OK(p2pt_block_layout_destroy(lay));
}

Test(block_layout, destroy_takes_null_and_refuses_what_is_not_a_layout)
{
    GT_OK(p2pt_block_layout_destroy(NULL));
    _Alignas(16) static unsigned char not_a_layout[256];
    BT_REFUSED(p2pt_block_layout_destroy((p2pt_block_layout *)(void *)not_a_layout),
               P2PT_INVALID_ARGUMENT, "p2pt_block_layout_destroy: ", "is not a block layout");
    const int64_t map[2] = {0, 0};
    BT_REFUSED(p2pt_block_layout_check((const p2pt_block_layout *)(const void *)not_a_layout, map,
                                       1, NULL),
               P2PT_INVALID_ARGUMENT, CHECK ": ", "is not a block layout");
}

Test(block_layout, every_bad_swap_argument_is_refused_before_the_driver)
{
    p2pt_handle *h = bt_cpu_handle("tma", NULL);
    _Alignas(16) static unsigned char fake_gpu[4096];
    p2pt_block_layer ls[2] = {layer((uintptr_t)(fake_gpu + 2048), (uintptr_t)(fake_gpu + 3072),
                                    16, 4, 4),
                              layer((uintptr_t)(fake_gpu + 2112), (uintptr_t)(fake_gpu + 3136),
                                    16, 4, 4)};
    p2pt_block_layout *lay = made(ls, 2);
    const int64_t *map = (const int64_t *)(void *)fake_gpu;
    void *ws = fake_gpu + 1024;
    const unsigned gpu = P2PT_BLOCK_MAPPING_ON_GPU;
    const uint64_t rejected = atomic_load(&h->stats.rejected);

    BT_REFUSED(p2pt_block_layout_swap(NULL, lay, map, 1, 0, NULL, NULL), P2PT_INVALID_ARGUMENT,
               SWAP ": handle is NULL");
    BT_REFUSED(p2pt_block_layout_swap((p2pt_handle *)(void *)fake_gpu, lay, map, 1, 0, NULL, NULL),
               P2PT_INVALID_USAGE, "not a live p2pt handle");
    BT_REFUSED(p2pt_block_layout_swap(h, NULL, map, 1, 0, NULL, NULL), P2PT_INVALID_ARGUMENT,
               SWAP ": layout is NULL");
    BT_REFUSED(p2pt_block_layout_swap(h, lay, map, 1, 4, NULL, NULL), P2PT_INVALID_ARGUMENT,
               SWAP ": flags 0x4", "P2PT_BLOCK_MAPPING_ON_GPU");
    /* A host mapping: the check's refusals, word for word. */
    const int64_t bad[2] = {0, 4};
    BT_REFUSED(p2pt_block_layout_swap(h, lay, bad, 1, 0, NULL, NULL), P2PT_INVALID_ARGUMENT,
               SWAP ": block_mapping[0, 1] = 4: dst block ids must be in [0, 4) (dst[0] has 4 "
                    "blocks)");
    /* A GPU mapping: p2pt_copy_blocks_device_async's refusals, named for this call. */
    BT_REFUSED(p2pt_block_layout_swap(h, lay, map, (size_t)UINT32_MAX + 1, gpu, ws, NULL),
               P2PT_INVALID_ARGUMENT, SWAP ": 4294967296 rows", "at most 4294967295");
    BT_REFUSED(p2pt_block_layout_swap(h, lay, NULL, 2, gpu, ws, NULL), P2PT_INVALID_ARGUMENT,
               SWAP ": mapping (nil)", "8-byte aligned");
    BT_REFUSED(p2pt_block_layout_swap(h, lay, map, 2, gpu, (char *)ws + 8, NULL),
               P2PT_INVALID_ARGUMENT, SWAP ": workspace", "p2pt_blocks_workspace_bytes(2, 2)");
    BT_REFUSED(p2pt_block_layout_swap(h, lay, map, (1u << 23) + 1, gpu, ws, NULL),
               P2PT_INVALID_ARGUMENT, "2 layers x 8388609 pairs", "device_batch_max");
    cr_assert_eq(atomic_load(&h->stats.rejected) - rejected, 3,
                 "the GPU mapping's refused arguments count as the pipeline counts them");
    /* Rows 0: nothing to do, nothing touched, no driver needed. */
    p2pt_batch_status rec;
    memset(&rec, 0x5A, sizeof(rec));
    GT_OK(p2pt_block_layout_swap(h, lay, NULL, 0, 0, &rec, NULL));
    expect_done(&rec, 0, "no row");
    GT_OK(p2pt_block_layout_swap(h, lay, NULL, 0, gpu, NULL, NULL));
    /* A transport that reads no GPU descriptors, before any driver call. */
    p2pt_handle *ce = bt_cpu_handle("ce", NULL);
    BT_REFUSED(p2pt_block_layout_swap(ce, lay, map, 2, gpu, ws, NULL), P2PT_NOT_SUPPORTED,
               SWAP ": the ce transport cannot read");
    /* Past the checks, this handle has no driver to go on with. */
    BT_REFUSED(p2pt_block_layout_swap(h, lay, map, 2, gpu, ws, NULL), P2PT_NO_DRIVER,
               "no CUDA driver");
    GT_OK(p2pt_block_layout_destroy(lay));
    p2pt_finalize(ce);
    p2pt_finalize(h);
}

Test(block_layout, the_plugin_table_has_the_four_slots)
{
    const p2pt_plugin_v1_t *p = &p2pt_plugin_v1;
    cr_assert_gt(p->struct_size, offsetof(p2pt_plugin_v1_t, block_layout_swap));
    cr_assert(p->block_layout_create && p->block_layout_destroy && p->block_layout_check &&
              p->block_layout_swap);
    p2pt_block_layer l = layer(0x100000, 0x900000, 64, 4, 4);
    p2pt_block_layout *lay = NULL;
    cr_assert_eq(p->block_layout_create(&l, 1, &lay), P2PT_SUCCESS);
    const int64_t map[2] = {3, 2};
    p2pt_batch_status rec;
    cr_assert_eq(p->block_layout_check(lay, map, 1, &rec), P2PT_SUCCESS);
    expect_done(&rec, 1, "through the table");
    cr_assert_eq(p->block_layout_swap(NULL, lay, map, 1, 0, NULL, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p->block_layout_destroy(lay), P2PT_SUCCESS);
}

/* ------------------------------------------------------- a cache to swap */

enum { LAYERS = 5, GPU_BLOCKS = 24, HOST_BLOCKS = 16, OFF = 3 };

/* LAYERS layers of `bb`-byte blocks in one pool a side (device or pinned
 * host), layer 0's block 0 at an odd offset. */
struct pools {
    struct gt_buf gpu, host, gpu2;
    uint64_t bb;
};

static struct pools pools_new(uint64_t bb)
{
    struct pools c = {gt_alloc(LAYERS * GPU_BLOCKS * bb + OFF),
                      gt_alloc_host(LAYERS * HOST_BLOCKS * bb + OFF),
                      gt_alloc(LAYERS * GPU_BLOCKS * bb + OFF), bb};
    return c;
}

static void pools_free(struct pools *c)
{
    gt_free(&c->gpu);
    gt_free(&c->host);
    gt_free(&c->gpu2);
}

static size_t blocks_of(const struct pools *c, const struct gt_buf *b)
{
    return b == &c->host ? HOST_BLOCKS : GPU_BLOCKS;
}

static void layers_between(const struct pools *c, const struct gt_buf *dst,
                           const struct gt_buf *src, p2pt_block_layer *ls)
{
    const size_t nd = blocks_of(c, dst), ns = blocks_of(c, src);
    for (size_t l = 0; l < LAYERS; l++)
        ls[l] = layer((uintptr_t)(dst->ptr + OFF + l * nd * c->bb),
                      (uintptr_t)(src->ptr + OFF + l * ns * c->bb), c->bb, nd, ns);
}

static void pieces_of(const p2pt_block_layer *ls, const int64_t *map, size_t pairs,
                      p2pt_copy_desc *d)
{
    for (size_t l = 0; l < LAYERS; l++)
        for (size_t r = 0; r < pairs; r++)
            d[l * pairs + r] = (p2pt_copy_desc){
                (char *)ls[l].dst + map[2 * r + 1] * ls[l].block_bytes,
                (const char *)ls[l].src + map[2 * r] * ls[l].block_bytes, ls[l].block_bytes};
}

/* Three mappings swapped on one layout, each way (`offload`: GPU to pinned
 * host; else back), the mapping in host memory or (`on_gpu`) in GPU memory:
 * every byte where the mapping says and nothing else, and each record. */
static void swaps_land(bool offload, bool on_gpu)
{
    enum { PAIRS = 9 };
    /* The fake driver's kernels move nothing: a host mapping runs there on
     * the copy engine, whatever P2P_TRANSPORT the suite runs under. */
    p2pt_handle *h = gt_handle(on_gpu ? "tma" : gt_on_fake_driver() ? "ce" : NULL);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct pools c = pools_new(4100);
    struct gt_buf *src = offload ? &c.gpu : &c.host, *dst = offload ? &c.host : &c.gpu;
    p2pt_block_layer ls[LAYERS];
    layers_between(&c, dst, src, ls);
    p2pt_block_layout *lay = made(ls, LAYERS);
    memset(ls, 0xEE, sizeof(ls)); /* the layout has its own copy */
    layers_between(&c, dst, src, ls);
    CUdeviceptr map_gpu = 0, ws = 0;
    const size_t ws_bytes = p2pt_blocks_workspace_bytes(LAYERS, PAIRS);
    if (on_gpu) {
        GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)c.gpu.base, c.gpu.n + 2 * GT_GUARD));
        GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)c.host.base,
                                   c.host.n + 2 * GT_GUARD));
        GT_CHECK(tcu.cuMemAlloc(&map_gpu, PAIRS * 16));
        GT_CHECK(tcu.cuMemAlloc(&ws, ws_bytes));
    }
    for (uint64_t round = 0; round < 3; round++) {
        int64_t map[2 * PAIRS];
        p2pt_copy_desc want[LAYERS * PAIRS];
        bt_random_map(map, PAIRS, blocks_of(&c, src), blocks_of(&c, dst), 40 + round, 3);
        pieces_of(ls, map, PAIRS, want);
        gt_fill(src, 50 + round);
        gt_poison(dst);
        unsigned char *src_host = bt_host_copy(src);
        const p2pt_properties before = gt_props(h);
        p2pt_batch_status rec;
        memset(&rec, 0x5A, sizeof(rec));
        if (on_gpu) {
            GT_CHECK(tcu.cuMemcpyHtoD(map_gpu, map, sizeof(map)));
            GT_CHECK(tcu.cuMemsetD8(ws, 0x5A, ws_bytes));
            GT_CHECK(tcu.cuCtxSynchronize());
            GT_OK(p2pt_block_layout_swap(h, lay, (const int64_t *)(uintptr_t)map_gpu, PAIRS,
                                         P2PT_BLOCK_MAPPING_ON_GPU, (void *)(uintptr_t)ws, s));
        } else {
            GT_OK(p2pt_block_layout_swap(h, lay, map, PAIRS, 0, &rec, s));
            memset(map, 0xEE, sizeof(map)); /* read before the call returned */
        }
        GT_CHECK(tcu.cuStreamSynchronize(s));
        const p2pt_properties after = gt_props(h);
        char what[96];
        snprintf(what, sizeof(what), "%s, %s mapping, round %llu", offload ? "offload" : "restore",
                 on_gpu ? "GPU" : "host", (unsigned long long)round);
        if (on_gpu) {
            cr_assert_eq(after.device_batches - before.device_batches, 1, "%s", what);
            GT_CHECK(tcu.cuMemcpyDtoH(&rec, ws, sizeof(rec)));
        } else {
            cr_assert_eq(after.batches - before.batches, 1, "%s: one host batch", what);
            cr_assert_eq(after.batch_pieces - before.batch_pieces, LAYERS * PAIRS, "%s", what);
        }
        if (!gt_on_fake_driver() || !on_gpu) { /* the fake driver's kernels do nothing */
            bt_expect(dst, src, src_host, want, LAYERS * PAIRS, NULL, what);
            expect_done(&rec, LAYERS * PAIRS, what);
        }
        free(src_host);
    }
    if (!on_gpu) {
        /* A refused mapping enqueues nothing and writes no record. */
        int64_t twice[4] = {0, 1, 2, 1};
        gt_poison(dst);
        p2pt_batch_status rec;
        memset(&rec, 0x5A, sizeof(rec));
        BT_REFUSED(p2pt_block_layout_swap(h, lay, twice, 2, 0, &rec, s), P2PT_INVALID_ARGUMENT,
                   SWAP ": mapping rows 0 and 1 both write dst block 1");
        GT_CHECK(tcu.cuStreamSynchronize(s));
        bt_expect(dst, src, NULL, NULL, 0, NULL, "a refused mapping");
        cr_assert_eq(rec.count, 0x5A5A5A5Au, "a refused swap writes no record");
    } else {
        tcu.cuMemFree(map_gpu);
        tcu.cuMemFree(ws);
    }
    GT_OK(p2pt_block_layout_destroy(lay));
    pools_free(&c);
    GT_CHECK(tcu.cuStreamDestroy(s));
    p2pt_finalize(h);
}

/* A GPU mapping's device batch on `options`' handle: its widest grid, with
 * `dst` and `src` the pools (host, GPU or the second GPU pool). Twice on
 * one layout: the layers are located at the first swap only. Over the
 * fake driver `*status_copies` is the launch's flag (CTA 0 copies after
 * the status record), else -1. */
static uint32_t gpu_mapping_grid(const char *options, bool host_dst, bool host_src,
                                 int *status_copies)
{
    p2pt_init_args a = {sizeof(a), NULL, "tma", options};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&a, &h));
    struct pools c = pools_new(4096);
    struct gt_buf *src = host_src ? &c.host : &c.gpu, *dst = host_dst ? &c.host : &c.gpu2;
    p2pt_block_layer ls[LAYERS];
    layers_between(&c, dst, src, ls);
    p2pt_block_layout *lay = made(ls, LAYERS);
    struct gt_buf *pools[] = {&c.gpu, &c.gpu2, &c.host};
    for (int i = 0; i < 3; i++)
        GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)pools[i]->base,
                                   pools[i]->n + 2 * GT_GUARD));
    int64_t map[8];
    bt_random_map(map, 4, blocks_of(&c, src), blocks_of(&c, dst), 7, 3);
    CUdeviceptr m, ws;
    GT_CHECK(tcu.cuMemAlloc(&m, sizeof(map)));
    GT_CHECK(tcu.cuMemAlloc(&ws, p2pt_blocks_workspace_bytes(LAYERS, 4)));
    GT_CHECK(tcu.cuMemcpyHtoD(m, map, sizeof(map)));
    /* Pointer queries are counted over the fake driver only. */
    const bool fake = gt_on_fake_driver();
    unsigned long asked[2];
    for (int k = 0; k < 2; k++) {
        const unsigned long before = fake ? gt_fake_calls("cuPointerGetAttributes") : 0;
        GT_OK(p2pt_block_layout_swap(h, lay, (const int64_t *)(uintptr_t)m, 4,
                                     P2PT_BLOCK_MAPPING_ON_GPU, (void *)(uintptr_t)ws, NULL));
        asked[k] = fake ? gt_fake_calls("cuPointerGetAttributes") - before : 0;
    }
    /* The first swap alone asks where the layers live: at least once per
     * pool (the layers of a pool share its allocation). */
    if (fake)
        cr_assert_geq(asked[0], asked[1] + 2, "pointer queries: %lu in the first swap, %lu in "
                      "the second", asked[0], asked[1]);
    GT_CHECK(tcu.cuCtxSynchronize());
    const p2pt_properties p = gt_props(h);
    cr_assert_eq(p.device_batches, 2);
    *status_copies = -1;
    if (fake) {
        char name[64];
        unsigned grid = 0;
        struct p2pt_batch_dev_params head;
        bt_fake_last_batch_launch(name, sizeof(name), &grid, &head);
        cr_assert_str_eq(name, "p2pt_batch_copy_dev");
        cr_assert_eq(grid, p.max_grid, "the last launch's grid %u, the widest %u", grid,
                     p.max_grid);
        *status_copies = (int)head.status_copies;
    }
    tcu.cuMemFree(m);
    tcu.cuMemFree(ws);
    GT_OK(p2pt_block_layout_destroy(lay));
    pools_free(&c);
    p2pt_finalize(h);
    return p.max_grid;
}

/* The built-in tables' link lines (any GPU these tests run on has one of
 * them, and the fake driver is an H100): 3 CTAs to the host, 8 to the GPU.
 * CTA 0 copies too on a narrow grid (the last share, after the status
 * record), except toward the host: there a third copying CTA slows a GEMM
 * beside (bench/results/offload.md), so it writes the record only. */
static void gpu_mapping_grids(void)
{
    int c[5];
    const uint32_t d2h = gpu_mapping_grid(NULL, true, false, &c[0]),
                   h2d = gpu_mapping_grid(NULL, false, true, &c[1]),
                   local = gpu_mapping_grid(NULL, false, false, &c[2]),
                   budget = gpu_mapping_grid("P2P_TRANSPORT_SM_BUDGET=2", true, false, &c[3]),
                   local_budget = gpu_mapping_grid("P2P_TRANSPORT_SM_BUDGET=4", false, false,
                                                   &c[4]);
    cr_assert(d2h > 0 && d2h <= 3, "GPU to host: a grid of %u CTAs, expected 1 to 3", d2h);
    cr_assert(h2d > 3 && h2d <= 8, "host to GPU: a grid of %u CTAs, expected 4 to 8", h2d);
    cr_assert_gt(local, 8, "GPU to GPU is not capped: %u CTAs", local);
    cr_assert_leq(budget, 2, "budget 2: a grid of %u CTAs", budget);
    cr_assert_leq(local_budget, 4, "budget 4: a grid of %u CTAs", local_budget);
    if (c[0] < 0)
        return; /* the flag is read over the fake driver only */
    cr_expect_eq(c[0], 0, "GPU to host: CTA 0 copies (status_copies %d)", c[0]);
    cr_expect_eq(c[3], 0, "GPU to host under budget 2: CTA 0 copies (status_copies %d)", c[3]);
    cr_expect_eq(c[1], 1, "host to GPU on %u CTAs: CTA 0 only writes the record", h2d);
    cr_expect_eq(c[2], 0, "the full grid of %u CTAs: CTA 0 copies", local);
    cr_expect_eq(c[4], 1, "GPU to GPU under budget 4: CTA 0 only writes the record");
}

/* ---------------------------------------------------------- fake driver */

Test(block_layout_fake, host_mappings_land_and_write_their_record_one_batch_each)
{
    gt_use_fake_driver();
    swaps_land(true, false);
    swaps_land(false, false);
}

Test(block_layout_fake, gpu_mappings_are_one_device_batch_each)
{
    gt_use_fake_driver();
    swaps_land(true, true);
    swaps_land(false, true);
}

Test(block_layout_fake, a_gpu_mapping_across_the_host_link_takes_only_its_ctas)
{
    gt_use_fake_driver();
    gpu_mapping_grids();
}

/* ------------------------------------------------------------------ GPU */

Test(block_layout_gpu, offload_and_restore_through_host_mappings_land_every_byte)
{
    gt_use_gpu();
    swaps_land(true, false);
    swaps_land(false, false);
}

Test(block_layout_gpu, offload_and_restore_through_gpu_mappings_land_every_byte)
{
    gt_use_gpu();
    swaps_land(true, true);
    swaps_land(false, true);
}

Test(block_layout_gpu, a_gpu_mapping_across_the_host_link_takes_only_its_ctas)
{
    gt_use_gpu();
    gpu_mapping_grids();
}

/* Captured once with the mapping copied into place from a staging buffer
 * (work on the stream before the swap, as a scheduler's kernel would write
 * it); each replay gets new rows there and must move exactly them. */
Test(block_layout_gpu, a_captured_swap_of_a_gpu_mapping_replays_with_new_rows)
{
    gt_use_gpu();
    cr_assert_not_null(tcu.cuStreamBeginCapture, "driver lacks stream capture");
    enum { PAIRS = 7 };
    p2pt_handle *h = gt_handle("tma");
    GT_OK(p2pt_prepare(h, 0));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct pools c = pools_new(4144);
    p2pt_block_layer ls[LAYERS];
    layers_between(&c, &c.host, &c.gpu, ls);
    p2pt_block_layout *lay = made(ls, LAYERS);
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)c.gpu.base, c.gpu.n + 2 * GT_GUARD));
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)c.host.base, c.host.n + 2 * GT_GUARD));
    CUdeviceptr map, staged, ws;
    const size_t ws_bytes = p2pt_blocks_workspace_bytes(LAYERS, PAIRS);
    GT_CHECK(tcu.cuMemAlloc(&map, PAIRS * 16));
    GT_CHECK(tcu.cuMemAlloc(&staged, PAIRS * 16));
    GT_CHECK(tcu.cuMemAlloc(&ws, ws_bytes));
    CUgraph g;
    CUgraphExec ge;
    GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    GT_CHECK(tcu.cuMemcpyAsync(map, staged, PAIRS * 16, s));
    const p2pt_status st = p2pt_block_layout_swap(h, lay, (const int64_t *)(uintptr_t)map, PAIRS,
                                                  P2PT_BLOCK_MAPPING_ON_GPU,
                                                  (void *)(uintptr_t)ws, s);
    GT_CHECK(tcu.cuStreamEndCapture(s, &g));
    GT_OK(st);
    GT_CHECK(tcu.cuGraphInstantiateWithFlags(&ge, g, 0));
    for (uint64_t replay = 0; replay < 4; replay++) {
        int64_t rows[2 * PAIRS];
        p2pt_copy_desc want[LAYERS * PAIRS];
        bt_random_map(rows, PAIRS, GPU_BLOCKS, HOST_BLOCKS, 60 + replay, 3);
        pieces_of(ls, rows, PAIRS, want);
        GT_CHECK(tcu.cuMemcpyHtoD(staged, rows, sizeof(rows)));
        gt_fill(&c.gpu, 70 + replay);
        gt_poison(&c.host);
        unsigned char *src_host = bt_host_copy(&c.gpu);
        GT_CHECK(tcu.cuGraphLaunch(ge, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        char what[48];
        snprintf(what, sizeof(what), "replay %llu", (unsigned long long)replay);
        bt_expect(&c.host, &c.gpu, src_host, want, LAYERS * PAIRS, NULL, what);
        p2pt_batch_status rec;
        GT_CHECK(tcu.cuMemcpyDtoH(&rec, ws, sizeof(rec)));
        expect_done(&rec, LAYERS * PAIRS, what);
        free(src_host);
    }
    GT_CHECK(tcu.cuGraphExecDestroy(ge));
    GT_CHECK(tcu.cuGraphDestroy(g));
    tcu.cuMemFree(map);
    tcu.cuMemFree(staged);
    tcu.cuMemFree(ws);
    GT_OK(p2pt_block_layout_destroy(lay));
    pools_free(&c);
    GT_CHECK(tcu.cuStreamDestroy(s));
    p2pt_finalize(h);
}
