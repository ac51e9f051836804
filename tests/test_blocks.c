/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt_copy_blocks_async and p2pt_explain_blocks: a KV cache's layers and
 * a block mapping as one host batch. Each case runs over the fake driver
 * (tests/fault/fake_cuda.c, any machine; copies are memcpy, kernels do
 * nothing) and on a real GPU (skipped without one, with the reason), with
 * the handle's transport from P2P_TRANSPORT. It proves:
 *   - offload (GPU to pinned host) and restore (back) of random blocks at
 *     odd block sizes and offsets land every byte where the mapping says,
 *     and nothing outside (guards, and every block the mapping skips);
 *   - the batch is one operation: `batches` counts 1, `batch_pieces`
 *     counts layers x rows;
 *   - a refused mapping enqueues nothing and changes no destination byte;
 *   - a piece the batch's pass refuses (a layer running past the end of
 *     its allocation) is named by its layer and row;
 *   - the copy engine groups blocks block by block (a 2D copy each) where
 *     the layers sit at a constant stride, layer by layer where the ids run
 *     adjacent, piece by piece where neither holds (`ce_operations`);
 *   - explain_blocks gives the engine and reason explain_batch gives for
 *     the same pieces, in the order the engine takes them.
 */
#include "batch_test.h"

enum { LAYERS = 6, GPU_BLOCKS = 40, HOST_BLOCKS = 24, PAIRS = 17, OFF = 3 };

/* The cache: LAYERS layers of `bb`-byte blocks in one GPU pool and one
 * pinned host pool, each layer's block 0 at an odd offset; `scale` times
 * GPU_BLOCKS and HOST_BLOCKS blocks a layer. */
struct cache {
    struct gt_buf gpu, host;
    uint64_t bb;
    size_t gpu_blocks, host_blocks;
};

static struct cache cache_scaled(uint64_t bb, size_t scale)
{
    struct cache c = {gt_alloc(LAYERS * GPU_BLOCKS * scale * bb + OFF),
                      gt_alloc_host(LAYERS * HOST_BLOCKS * scale * bb + OFF), bb,
                      GPU_BLOCKS * scale, HOST_BLOCKS * scale};
    return c;
}

static struct cache cache_new(uint64_t bb)
{
    return cache_scaled(bb, 1);
}

static void cache_layers(const struct cache *c, bool offload, p2pt_block_layer *ls)
{
    for (size_t l = 0; l < LAYERS; l++) {
        CUdeviceptr g = c->gpu.ptr + OFF + l * c->gpu_blocks * c->bb;
        CUdeviceptr p = c->host.ptr + OFF + l * c->host_blocks * c->bb;
        ls[l] = (p2pt_block_layer){sizeof(ls[l]), (void *)(uintptr_t)(offload ? p : g),
                                   (const void *)(uintptr_t)(offload ? g : p), c->bb,
                                   offload ? c->host_blocks : c->gpu_blocks,
                                   offload ? c->gpu_blocks : c->host_blocks};
    }
}

/* Distinct random ids in [0, n) for column `col` of the mapping's
 * `pairs` rows. */
static void random_ids_of(int64_t *map, size_t pairs, int col, size_t n, uint64_t seed)
{
    struct bt_rng r = {seed * 0x9E3779B97F4A7C15ull + 11};
    cr_assert_leq(pairs, n, "%zu distinct ids among %zu", pairs, n);
    int64_t *perm = malloc(n * sizeof(*perm));
    cr_assert_not_null(perm);
    for (size_t i = 0; i < n; i++)
        perm[i] = (int64_t)i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = bt_next(&r) % (i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < pairs; i++)
        map[2 * i + col] = perm[i];
    free(perm);
}

static void random_ids(int64_t *map, int col, size_t n, uint64_t seed)
{
    random_ids_of(map, PAIRS, col, n, seed);
}

/* The pieces the mapping's `pairs` rows mean, written out here independently. */
static void expected_pieces_of(const p2pt_block_layer *ls, const int64_t *map, size_t pairs,
                               p2pt_copy_desc *d)
{
    for (size_t l = 0; l < LAYERS; l++)
        for (size_t r = 0; r < pairs; r++) {
            d[l * pairs + r].dst = (char *)ls[l].dst + map[2 * r + 1] * ls[l].block_bytes;
            d[l * pairs + r].src = (const char *)ls[l].src + map[2 * r] * ls[l].block_bytes;
            d[l * pairs + r].bytes = ls[l].block_bytes;
        }
}

static void expected_pieces(const p2pt_block_layer *ls, const int64_t *map, p2pt_copy_desc *d)
{
    expected_pieces_of(ls, map, PAIRS, d);
}

/* How a case's mapping and layers are laid out: ids at random or in a run
 * (row i: src block i + 1, dst block i + 2), and the layer records in the
 * cache's order or reversed (so that they do not sit at rising strides). */
struct way {
    size_t scale, pairs;
    const char *options; /* the handle's (NULL: none) */
    bool adjacent, reversed;
};

/* Offload (GPU to pinned host) or restore of `w.pairs` blocks of every
 * layer, in a cache `w.scale` times the base size; every byte checked.
 * Returns the copy-engine operations the batch took. */
static uint64_t one_way_with(uint64_t bb, bool offload, struct way w)
{
    const size_t scale = w.scale, pairs = w.pairs;
    const char *options = w.options;
    p2pt_init_args a = {.size = sizeof(a), .options = options};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&a, &h));
    struct cache c = cache_scaled(bb, scale);
    struct gt_buf *src = offload ? &c.gpu : &c.host, *dst = offload ? &c.host : &c.gpu;
    gt_fill(src, 1000 + bb + offload);
    gt_poison(dst);
    p2pt_block_layer ls[LAYERS];
    int64_t *map = malloc(2 * pairs * sizeof(*map));
    p2pt_copy_desc *want = malloc(LAYERS * pairs * sizeof(*want));
    cr_assert(map != NULL && want != NULL);
    cache_layers(&c, offload, ls);
    for (size_t l = 0; w.reversed && l < LAYERS / 2; l++) {
        p2pt_block_layer t = ls[l];
        ls[l] = ls[LAYERS - 1 - l];
        ls[LAYERS - 1 - l] = t;
    }
    random_ids_of(map, pairs, 0, offload ? c.gpu_blocks : c.host_blocks, bb);
    random_ids_of(map, pairs, 1, offload ? c.host_blocks : c.gpu_blocks, bb + 1);
    for (size_t i = 0; w.adjacent && i < pairs; i++) {
        map[2 * i] = (int64_t)i + 1;
        map[2 * i + 1] = (int64_t)i + 2;
    }
    expected_pieces_of(ls, map, pairs, want);
    unsigned char *src_host = bt_host_copy(src);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const p2pt_properties before = gt_props(h);
    GT_OK(p2pt_copy_blocks_async(h, ls, LAYERS, map, pairs, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    const p2pt_properties after = gt_props(h);
    cr_assert_eq(after.batches - before.batches, 1);
    cr_assert_eq(after.batch_pieces - before.batch_pieces, LAYERS * pairs);
    char what[96];
    snprintf(what, sizeof(what), "%s of %llu-byte blocks through %s",
             offload ? "offload" : "restore", (unsigned long long)bb, after.transport);
    if (!gt_on_fake_driver() || after.kernel_launches == before.kernel_launches)
        bt_expect(dst, src, src_host, want, LAYERS * pairs, NULL, what);
    free(src_host);
    free(map);
    free(want);
    GT_CHECK(tcu.cuStreamDestroy(s));
    gt_free(&c.gpu);
    gt_free(&c.host);
    p2pt_finalize(h);
    return after.ce_operations - before.ce_operations;
}

static void one_way_of(uint64_t bb, bool offload, size_t scale, size_t pairs,
                       const char *options)
{
    one_way_with(bb, offload, (struct way){scale, pairs, options, false, false});
}

static void one_way(uint64_t bb, bool offload)
{
    one_way_of(bb, offload, 1, PAIRS, NULL);
}

static void both_ways(void)
{
    const uint64_t sizes[] = {4100, 16384, 37};
    for (size_t i = 0; i < P2PT_ARRAY_LEN(sizes); i++) {
        one_way(sizes[i], true);
        one_way(sizes[i], false);
    }
}

Test(blocks_fake, offload_and_restore_land_every_block_where_the_mapping_says)
{
    gt_use_fake_driver();
    both_ways();
}

Test(blocks_gpu, offload_and_restore_land_every_block_where_the_mapping_says)
{
    gt_use_gpu();
    both_ways();
}

/* Enough pieces for the staging ring and the link kernel (more than one
 * launch's parameters hold): 6 layers x 300 blocks each way. Blocks of a
 * multiple of 16 bytes are staged as blocks and made into pieces by the
 * kernel, read in place or copied to GPU memory first; blocks of an odd
 * size are written out piece by piece. */
static void many_blocks(void)
{
    const char *staging[] = {NULL, "P2P_TRANSPORT_BATCH_STAGING=gpu"};
    for (int k = 0; k < 2; k++) {
        one_way_of(16384, true, 16, 300, staging[k]);
        one_way_of(16384, false, 16, 300, staging[k]);
        one_way_of(4096 + 48, true, 16, 300, staging[k]);
    }
    one_way_of(4100, true, 16, 300, NULL);
    one_way_of(4100, false, 16, 300, NULL);
}

Test(blocks_fake, many_blocks_land_where_the_mapping_says)
{
    gt_use_fake_driver();
    many_blocks();
}

Test(blocks_gpu, many_blocks_land_where_the_mapping_says)
{
    gt_use_gpu();
    many_blocks();
}

/* The copy engine takes blocks in whichever order groups them into fewer
 * operations: block by block where the layers sit at rising constant
 * strides (one 2D copy of a row per layer for each block), layer by layer
 * where the mapping's rows run on adjacent ids (one copy per layer) or the
 * layers do not sit so (a copy per piece). Both ways, byte-exact, with the
 * copy engine chosen by name and by a budget of 0. */
static void ce_groups(void)
{
    const char *handles[] = {"P2P_TRANSPORT=ce", "P2P_TRANSPORT=auto P2P_TRANSPORT_SM_BUDGET=0"};
    for (int k = 0; k < 2; k++)
        for (int way = 0; way < 2; way++) {
            const bool off = way == 0;
            const char *o = handles[k];
            uint64_t n = one_way_with(16384, off, (struct way){1, PAIRS, o, false, false});
            cr_expect_eq(n, PAIRS, "%s, %s, random ids: %llu operations for %d blocks", o,
                         off ? "offload" : "restore", (unsigned long long)n, PAIRS);
            n = one_way_with(4096 + 48, off, (struct way){1, PAIRS, o, true, false});
            cr_expect_eq(n, LAYERS, "%s, %s, a run of ids: %llu operations for %d layers", o,
                         off ? "offload" : "restore", (unsigned long long)n, LAYERS);
            n = one_way_with(16384, off, (struct way){1, PAIRS, o, false, true});
            cr_expect_eq(n, LAYERS * PAIRS, "%s, %s, layers reversed: %llu operations", o,
                         off ? "offload" : "restore", (unsigned long long)n);
        }
}

/* More layers than the pass keeps on its stack (64): 70 layers of 4 KiB
 * blocks, one allocation a side, 9 random blocks offloaded through the copy
 * engine: 9 2D copies, every byte where the mapping says. */
static void ce_groups_many_layers(void)
{
    enum { N_LAYERS = 70, BLOCKS = 12, ROWS = 9 };
    const uint64_t bb = 4096;
    p2pt_handle *h = NULL;
    p2pt_init_args a = {.size = sizeof(a), .options = "P2P_TRANSPORT=ce"};
    GT_OK(p2pt_init(&a, &h));
    struct gt_buf gpu = gt_alloc(N_LAYERS * BLOCKS * bb);
    struct gt_buf host = gt_alloc_host(N_LAYERS * BLOCKS * bb);
    gt_fill(&gpu, 70);
    gt_poison(&host);
    p2pt_block_layer ls[N_LAYERS];
    for (size_t l = 0; l < N_LAYERS; l++)
        ls[l] = (p2pt_block_layer){sizeof(ls[l]),
                                   (void *)(uintptr_t)(host.ptr + l * BLOCKS * bb),
                                   (const void *)(uintptr_t)(gpu.ptr + l * BLOCKS * bb), bb,
                                   BLOCKS, BLOCKS};
    int64_t map[2 * ROWS];
    random_ids_of(map, ROWS, 0, BLOCKS, 7);
    random_ids_of(map, ROWS, 1, BLOCKS, 8);
    p2pt_copy_desc want[N_LAYERS * ROWS];
    for (size_t l = 0; l < N_LAYERS; l++)
        for (size_t r = 0; r < ROWS; r++)
            want[l * ROWS + r] = (p2pt_copy_desc){(char *)ls[l].dst + map[2 * r + 1] * bb,
                                                  (const char *)ls[l].src + map[2 * r] * bb, bb};
    unsigned char *src_host = bt_host_copy(&gpu);
    const p2pt_properties before = gt_props(h);
    GT_OK(p2pt_copy_blocks_async(h, ls, N_LAYERS, map, ROWS, NULL));
    GT_CHECK(tcu.cuCtxSynchronize());
    const uint64_t ops = gt_props(h).ce_operations - before.ce_operations;
    cr_expect_eq(ops, ROWS, "%llu operations for %d blocks of %d layers", (unsigned long long)ops,
                 ROWS, N_LAYERS);
    bt_expect(&host, &gpu, src_host, want, N_LAYERS * ROWS, NULL, "70 layers through ce");
    free(src_host);
    gt_free(&gpu);
    gt_free(&host);
    p2pt_finalize(h);
}

Test(blocks_fake, ce_groups_blocks_of_more_layers_than_fit_on_the_stack)
{
    gt_use_fake_driver();
    ce_groups_many_layers();
}

Test(blocks_gpu, ce_groups_blocks_of_more_layers_than_fit_on_the_stack)
{
    gt_use_gpu();
    ce_groups_many_layers();
}

Test(blocks_fake, ce_groups_blocks_into_2d_copies_or_runs_whichever_is_fewer)
{
    gt_use_fake_driver();
    ce_groups();
}

Test(blocks_gpu, ce_groups_blocks_into_2d_copies_or_runs_whichever_is_fewer)
{
    gt_use_gpu();
    ce_groups();
}

/* A mapping the plan refuses: nothing enqueued, no byte of dst changed. A
 * layer in pageable memory: the pass names the layer and the row. */
static void refusals(void)
{
    p2pt_handle *h = gt_handle(NULL);
    struct cache c = cache_new(4096);
    gt_fill(&c.gpu, 5);
    gt_poison(&c.host);
    p2pt_block_layer ls[LAYERS];
    int64_t map[2 * PAIRS];
    cache_layers(&c, true, ls);
    random_ids(map, 0, GPU_BLOCKS, 1);
    random_ids(map, 1, HOST_BLOCKS, 2);
    map[2 * 4 + 1] = HOST_BLOCKS; /* one past the end */
    const p2pt_properties before = gt_props(h);
    cr_assert_eq(p2pt_copy_blocks_async(h, ls, LAYERS, map, PAIRS, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(h), "mapping row 4: dst block 24") != NULL, "%s",
              p2pt_last_error(h));
    GT_CHECK(tcu.cuCtxSynchronize());
    cr_assert_eq(gt_props(h).batches, before.batches);
    bt_expect(&c.host, &c.gpu, NULL, NULL, 0, NULL, "a refused mapping");
    map[2 * 4 + 1] = 0;
    random_ids(map, 1, HOST_BLOCKS, 2);
    /* One row whose block in layer 2 starts 100 bytes before the end of
     * the host pool's allocation: it straddles the end. */
    ls[2].dst = (void *)(uintptr_t)(c.host.base + c.host.n + 2 * GT_GUARD - 100);
    map[1] = 0;
    p2pt_status st = p2pt_copy_blocks_async(h, ls, LAYERS, map, 1, NULL);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "status %d: %s", st, p2pt_last_error(h));
    const char *msg = p2pt_last_error(h);
    cr_assert(strstr(msg, "p2pt_copy_blocks_async: layer 2, row 0 (piece 2 of 6)") != NULL &&
                  strstr(msg, "runs past the end of its allocation") != NULL,
              "%s", msg);
    cr_assert_eq(gt_props(h).batches, before.batches);
    gt_free(&c.gpu);
    gt_free(&c.host);
    p2pt_finalize(h);
}

Test(blocks_fake, a_refused_mapping_enqueues_nothing_and_names_the_row)
{
    gt_use_fake_driver();
    refusals();
}

Test(blocks_gpu, a_refused_mapping_enqueues_nothing_and_names_the_row)
{
    gt_use_gpu();
    refusals();
}

static void explain_agrees(void)
{
    p2pt_handle *h = gt_handle(NULL);
    struct cache c = cache_new(16384);
    p2pt_block_layer ls[LAYERS];
    int64_t map[2 * PAIRS];
    p2pt_copy_desc want[LAYERS * PAIRS];
    cache_layers(&c, true, ls);
    random_ids(map, 0, GPU_BLOCKS, 3);
    random_ids(map, 1, HOST_BLOCKS, 4);
    expected_pieces(ls, map, want);
    /* Block by block, as the copy engine takes these layers (they sit at a
     * constant stride), so that its grouping reads the same both ways. */
    p2pt_copy_desc by_block[LAYERS * PAIRS];
    for (size_t r = 0; r < PAIRS; r++)
        for (size_t l = 0; l < LAYERS; l++)
            by_block[r * LAYERS + l] = want[l * PAIRS + r];
    p2pt_choice a = {sizeof(a)}, b = {sizeof(b)};
    GT_OK(p2pt_explain_blocks(h, ls, LAYERS, map, PAIRS, NULL, &a));
    GT_OK(p2pt_explain_batch(h, by_block, LAYERS * PAIRS, NULL, &b));
    cr_assert_str_eq(a.transport, b.transport);
    cr_assert_str_eq(a.path, "batch");
    /* The same from the table's band on (auto words the mean differently
     * when the sums come with the batch). */
    const char *ta = strstr(a.reason, "table "), *tb = strstr(b.reason, "table ");
    cr_assert_str_eq(ta ? ta : a.reason, tb ? tb : b.reason);
    cr_assert_eq(p2pt_explain_blocks(h, ls, LAYERS, map, PAIRS, NULL, NULL),
                 P2PT_INVALID_ARGUMENT);
    gt_free(&c.gpu);
    gt_free(&c.host);
    p2pt_finalize(h);
}

Test(blocks_fake, explain_blocks_says_what_explain_batch_says)
{
    gt_use_fake_driver();
    explain_agrees();
}

Test(blocks_gpu, explain_blocks_says_what_explain_batch_says)
{
    gt_use_gpu();
    explain_agrees();
}
