/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt_copy_blocks_device_async: a KV cache's layers moved by a block
 * mapping that lives in GPU memory, as one device batch whose descriptors
 * the library writes on the stream. It proves:
 *   - every bad argument is refused before anything is enqueued, with the
 *     status and a message naming the value and what was expected (no
 *     driver needed), and "ce" or an SM budget of 1 is status 6;
 *   - over the fake driver: one expand launch per 64 layers, then one
 *     device batch launch; the mapping and the workspace are checked where
 *     they live; the SM budget bounds every launch;
 *   - on a GPU (skipped without one, with the reason): random blocks of
 *     16384, 4144, 4100 and 24 bytes over 3 and 70 layers (past one expand
 *     launch), GPU to GPU and both ways across pinned host memory, land
 *     where the mapping says, nothing outside (guards, every block the
 *     mapping skips), and every word of the status record is written;
 *   - ids outside their layer (negative, == blocks, huge) and a layer
 *     outside every window are skipped, counted and named (first_bad), and
 *     not one byte outside dst changes;
 *   - a graph captured once replays with new mapping rows written on the
 *     GPU before each replay, every byte right.
 */
#include <stddef.h>

#include "batch_test.h"
#include "p2pt_plugin.h"

#define FN "p2pt_copy_blocks_device_async"

/* ------------------------------------------------------------ arguments */

Test(blocks_device_args, every_bad_argument_is_named_with_what_was_expected)
{
    p2pt_handle *h = bt_cpu_handle("tma", NULL);
    _Alignas(16) static unsigned char fake_gpu[4096];
    const int64_t *map = (const int64_t *)(void *)fake_gpu;
    void *ws = fake_gpu + 1024;
    p2pt_block_layer ls[3];
    for (int l = 0; l < 3; l++)
        ls[l] = (p2pt_block_layer){sizeof(ls[l]), fake_gpu + 2048, fake_gpu + 3072, 16, 4, 4};

    BT_REFUSED(p2pt_copy_blocks_device_async(NULL, ls, 3, map, 2, ws, NULL),
               P2PT_INVALID_ARGUMENT, FN);
    BT_REFUSED(p2pt_copy_blocks_device_async(h, NULL, 3, map, 2, ws, NULL), P2PT_INVALID_ARGUMENT,
               FN ": layers is NULL", "3 p2pt_block_layer");
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 0, map, 2, ws, NULL), P2PT_INVALID_ARGUMENT,
               "n_layers 0, pairs 2", "at least one layer");
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, map, 0, ws, NULL), P2PT_INVALID_ARGUMENT,
               "n_layers 3, pairs 0", "one mapping row");
    /* Too many pieces: refused before a layer record is read. */
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 2, map, (1u << 23) + 1, ws, NULL),
               P2PT_INVALID_ARGUMENT, "2 layers x 8388609 pairs", "device_batch_max: 16777216");
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, (size_t)1 << 40, map, 1u << 30, ws, NULL),
               P2PT_INVALID_ARGUMENT, "1099511627776 layers x 1073741824 pairs");
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, NULL, 2, ws, NULL), P2PT_INVALID_ARGUMENT,
               "mapping (nil)", "2 (src, dst) int64 rows, 8-byte aligned");
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, (const int64_t *)(void *)(fake_gpu + 4), 2,
                                             ws, NULL),
               P2PT_INVALID_ARGUMENT, "8-byte aligned");
    char want_ws[96];
    snprintf(want_ws, sizeof(want_ws), "p2pt_blocks_workspace_bytes(3, 2) = %zu bytes",
             p2pt_blocks_workspace_bytes(3, 2));
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, map, 2, NULL, NULL), P2PT_INVALID_ARGUMENT,
               "workspace (nil)", want_ws, "16-byte aligned");
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, map, 2, (char *)ws + 8, NULL),
               P2PT_INVALID_ARGUMENT, "16-byte aligned");

    /* The layer records: p2pt_copy_blocks_async's checks and messages. */
    ls[0].size = 8;
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, map, 2, ws, NULL), P2PT_INVALID_ARGUMENT,
               FN ": layers[0].size is 8", "sizeof(p2pt_block_layer)");
    ls[0].size = sizeof(ls[0]);
    ls[2].size = sizeof(ls[0]) + 8;
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, map, 2, ws, NULL), P2PT_INVALID_ARGUMENT,
               "layer 2: size");
    ls[2].size = sizeof(ls[0]);
    ls[1].block_bytes = 0;
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, map, 2, ws, NULL), P2PT_INVALID_ARGUMENT,
               FN ": layer 1: block_bytes 0: expected 1 to 4294967295");
    ls[1].block_bytes = (uint64_t)1 << 32;
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, map, 2, ws, NULL), P2PT_INVALID_ARGUMENT,
               "layer 1: block_bytes 4294967296");
    ls[1].block_bytes = 16;
    ls[2].dst = (void *)(uintptr_t)(UINTPTR_MAX - 40);
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, map, 2, ws, NULL), P2PT_INVALID_ARGUMENT,
               "layer 2: 4 dst blocks of 16 bytes", "past the end of the address space");
    ls[2].dst = NULL;
    BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, map, 2, ws, NULL), P2PT_INVALID_ARGUMENT,
               "layer 2: dst is NULL with 4 blocks");
    /* The same layer check, word for word, as the host mapping's call. */
    int64_t host_map[4] = {0, 1, 2, 3};
    cr_assert_eq(p2pt_copy_blocks_async(h, ls, 3, host_map, 2, NULL), P2PT_INVALID_ARGUMENT);
    char host_msg[512];
    snprintf(host_msg, sizeof(host_msg), "%s", p2pt_last_error(NULL));
    cr_assert_eq(p2pt_copy_blocks_device_async(h, ls, 3, map, 2, ws, NULL),
                 P2PT_INVALID_ARGUMENT);
    cr_assert_str_eq(strstr(p2pt_last_error(NULL), ": layer"), strstr(host_msg, ": layer"));
    const uint64_t rejected = atomic_load(&h->stats.rejected);
    cr_assert_eq(rejected, 16, "%llu refusals counted", (unsigned long long)rejected);
    p2pt_finalize(h);
}

Test(blocks_device_args, ce_and_a_budget_of_one_cta_are_status_6)
{
    p2pt_handle *ce = bt_cpu_handle("ce", NULL),
                *one = bt_cpu_handle("tma", "P2P_TRANSPORT_SM_BUDGET=1");
    _Alignas(16) static unsigned char fake_gpu[1024];
    p2pt_block_layer l = {sizeof(l), fake_gpu + 512, fake_gpu + 768, 16, 4, 4};
    const int64_t *map = (const int64_t *)(void *)fake_gpu;
    BT_REFUSED(p2pt_copy_blocks_device_async(ce, &l, 1, map, 1, fake_gpu + 256, NULL),
               P2PT_NOT_SUPPORTED, FN ": the ce transport cannot read", "P2P_TRANSPORT=tma");
    BT_REFUSED(p2pt_copy_blocks_device_async(one, &l, 1, map, 1, fake_gpu + 256, NULL),
               P2PT_NOT_SUPPORTED, FN ": P2P_TRANSPORT_SM_BUDGET=1", "at least 2 CTAs");
    p2pt_finalize(ce);
    p2pt_finalize(one);
}

Test(blocks_device_args, the_workspace_is_the_status_record_then_a_count_and_the_pieces)
{
    cr_assert_eq(p2pt_blocks_workspace_bytes(3, 5), 80 + 15 * sizeof(p2pt_copy_desc));
    cr_assert_geq(p2pt_blocks_workspace_bytes(1, 1),
                  sizeof(p2pt_batch_status) + sizeof(uint32_t) + sizeof(p2pt_copy_desc));
    cr_assert_geq(p2pt_blocks_workspace_bytes(1, 1), p2pt_batch_workspace_bytes(1));
    cr_assert_eq(p2pt_blocks_workspace_bytes(SIZE_MAX / 2, 4), SIZE_MAX);
    cr_assert_eq(offsetof(struct p2pt_blocks_ws_head, batch), 0);
    cr_assert_eq(sizeof(struct p2pt_blocks_ws_head) % 16, 0, "descriptors 16-byte aligned");
    cr_assert_leq(sizeof(struct p2pt_expand_params), 4096, "%zu bytes of parameters",
                  sizeof(struct p2pt_expand_params));
    /* The plugin table's slots. */
    const p2pt_plugin_v1_t *p = &p2pt_plugin_v1;
    cr_assert_gt(p->struct_size, offsetof(p2pt_plugin_v1_t, blocks_workspace_bytes));
    cr_assert_not_null(p->copy_blocks_device_async);
    cr_assert_eq(p->blocks_workspace_bytes(2, 3), p2pt_blocks_workspace_bytes(2, 3));
    cr_assert_eq(p->copy_blocks_device_async(NULL, NULL, 1, NULL, 1, NULL, NULL),
                 P2PT_INVALID_ARGUMENT);
}

/* ---------------------------------------------------------------- cache */

/* One side of a cache: `layers` layers of `blocks` blocks of `bb` bytes,
 * layer 0's block 0 at an odd offset of a pool (device or pinned host). */
struct side {
    struct gt_buf pool;
    size_t blocks;
};

enum { OFF = 3 };

static struct side side_new(bool host, size_t layers, size_t blocks, uint64_t bb)
{
    const size_t n = layers * blocks * bb + OFF;
    struct side s = {host ? gt_alloc_host(n) : gt_alloc(n), blocks};
    return s;
}

static void *block_base(const struct side *s, size_t l, uint64_t bb)
{
    return (void *)(uintptr_t)(s->pool.ptr + OFF + l * s->blocks * bb);
}

static void layers_of(const struct side *dst, const struct side *src, size_t n, uint64_t bb,
                      p2pt_block_layer *ls)
{
    for (size_t l = 0; l < n; l++)
        ls[l] = (p2pt_block_layer){sizeof(ls[l]), block_base(dst, l, bb), block_base(src, l, bb),
                                   bb, dst->blocks, src->blocks};
}

/* Both pools (guards included) as windows of device 0. */
static void windows(p2pt_handle *h, const struct side *a, const struct side *b)
{
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)a->pool.base, a->pool.n + 2 * GT_GUARD));
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)b->pool.base, b->pool.n + 2 * GT_GUARD));
}

/* The pieces the mapping means, written out independently; a row with an
 * id outside its layer is not ok. */
static void expected(const p2pt_block_layer *ls, size_t n_layers, const int64_t *map,
                     size_t pairs, p2pt_copy_desc *d, bool *ok)
{
    for (size_t l = 0; l < n_layers; l++)
        for (size_t r = 0; r < pairs; r++) {
            const size_t i = l * pairs + r;
            const int64_t s = map[2 * r], t = map[2 * r + 1];
            ok[i] = s >= 0 && (uint64_t)s < ls[l].src_blocks && t >= 0 &&
                    (uint64_t)t < ls[l].dst_blocks;
            d[i] = ok[i] ? (p2pt_copy_desc){(char *)ls[l].dst + t * ls[l].block_bytes,
                                            (const char *)ls[l].src + s * ls[l].block_bytes,
                                            ls[l].block_bytes}
                         : (p2pt_copy_desc){NULL, NULL, 0};
        }
}

/* GPU memory: the mapping and the workspace. */
struct gpu_args {
    CUdeviceptr map, ws;
    size_t map_bytes, ws_bytes;
};

static struct gpu_args gpu_args_new(size_t n_layers, size_t pairs)
{
    struct gpu_args a = {0, 0, pairs * 16, p2pt_blocks_workspace_bytes(n_layers, (uint32_t)pairs)};
    GT_CHECK(tcu.cuMemAlloc(&a.map, a.map_bytes));
    GT_CHECK(tcu.cuMemAlloc(&a.ws, a.ws_bytes));
    return a;
}

static void gpu_args_free(struct gpu_args *a)
{
    tcu.cuMemFree(a->map);
    tcu.cuMemFree(a->ws);
}

static p2pt_batch_status status_of(const struct gpu_args *a)
{
    p2pt_batch_status st;
    GT_CHECK(tcu.cuMemcpyDtoH(&st, a->ws, sizeof(st)));
    return st;
}

/* ------------------------------------------------------- fake driver */

Test(blocks_device_fake, one_expand_launch_per_64_layers_then_one_batch)
{
    gt_use_fake_driver();
    static const size_t layer_counts[] = {1, 3, 64, 65, 70, 128, 129};
    const size_t pairs = 5, blocks = 8;
    const uint64_t bb = 4100;
    for (int budget = 0; budget < 2; budget++) {
        p2pt_handle *h = NULL;
        p2pt_init_args ia = {.size = sizeof(ia),
                             .options = budget ? "P2P_TRANSPORT_SM_BUDGET=2" : NULL,
                             .transport = "tma"};
        GT_OK(p2pt_init(&ia, &h));
        struct side dst = side_new(false, 129, blocks, bb), src = side_new(true, 129, blocks, bb);
        windows(h, &dst, &src);
        p2pt_block_layer ls[129];
        layers_of(&dst, &src, 129, bb, ls);
        struct gpu_args a = gpu_args_new(129, pairs);
        for (size_t k = 0; k < P2PT_ARRAY_LEN(layer_counts); k++) {
            const size_t n = layer_counts[k];
            const p2pt_properties before = gt_props(h);
            GT_OK(p2pt_copy_blocks_device_async(h, ls, n, (const int64_t *)(uintptr_t)a.map,
                                                (uint32_t)pairs, (void *)(uintptr_t)a.ws, NULL));
            const p2pt_properties after = gt_props(h);
            const uint64_t expands = (n + 63) / 64;
            cr_assert_eq(after.kernel_launches - before.kernel_launches, expands + 1,
                         "%zu layers: %llu launches, expected %llu expand + 1 batch", n,
                         (unsigned long long)(after.kernel_launches - before.kernel_launches),
                         (unsigned long long)expands);
            cr_assert_eq(after.batch_launches - before.batch_launches, 1);
            cr_assert_eq(after.device_batches - before.device_batches, 1);
            if (budget)
                cr_assert_leq(after.max_grid, 2, "budget 2: a grid of %u CTAs", after.max_grid);
        }
        /* Where the mapping and the workspace live, checked by the driver. */
        BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, (const int64_t *)(uintptr_t)a.map,
                                                 (uint32_t)pairs + 1, (void *)(uintptr_t)a.ws,
                                                 NULL),
                   P2PT_INVALID_ARGUMENT, FN ": mapping", "runs past the end of its allocation");
        BT_REFUSED(p2pt_copy_blocks_device_async(h, ls, 3, (const int64_t *)(uintptr_t)a.map,
                                                 (uint32_t)pairs,
                                                 (void *)(uintptr_t)(a.ws + (a.ws_bytes & ~(size_t)15) - 400),
                                                 NULL),
                   P2PT_INVALID_ARGUMENT, FN ": workspace", "runs past the end of its allocation");
        gpu_args_free(&a);
        gt_free(&dst.pool);
        gt_free(&src.pool);
        p2pt_finalize(h);
    }
}

/* ---------------------------------------------------------------- GPU */

/* The handle's transport: the suite's, except "ce", which reads no GPU
 * descriptors (its refusal is a test of its own). */
static p2pt_handle *gpu_handle(void)
{
    const char *t = getenv("P2P_TRANSPORT");
    return gt_handle(t != NULL && strcmp(t, "auto") == 0 ? "auto" : "tma");
}

/* What every GPU test here starts with (a GPU, or the skip; a handle; a
 * stream of its own) and ends with. */
struct gpu_case {
    p2pt_handle *h;
    CUstream s;
};

static struct gpu_case gpu_case_open(void)
{
    gt_use_gpu();
    struct gpu_case c = {gpu_handle(), NULL};
    GT_CHECK(tcu.cuStreamCreate(&c.s, CU_STREAM_NON_BLOCKING));
    return c;
}

static void gpu_case_close(struct gpu_case c)
{
    GT_CHECK(tcu.cuStreamDestroy(c.s));
    p2pt_finalize(c.h);
}

/* One call over `n_layers` layers of `bb`-byte blocks from `src` to `dst`
 * (`host_src`/`host_dst`: pinned host memory), the mapping `map` (NULL:
 * random distinct ids), checked byte for byte and in the status record. */
static void one_call(p2pt_handle *h, CUstream s, uint64_t bb, size_t n_layers, bool host_dst,
                     bool host_src, const int64_t *map_in, size_t pairs, uint64_t seed)
{
    enum { DST_BLOCKS = 24, SRC_BLOCKS = 20 };
    struct side dst = side_new(host_dst, n_layers, DST_BLOCKS, bb),
                src = side_new(host_src, n_layers, SRC_BLOCKS, bb);
    windows(h, &dst, &src);
    gt_fill(&src.pool, seed);
    gt_poison(&dst.pool);
    p2pt_block_layer *ls = malloc(n_layers * sizeof(*ls));
    int64_t *map = malloc(2 * pairs * sizeof(*map));
    p2pt_copy_desc *want = malloc(n_layers * pairs * sizeof(*want));
    bool *ok = malloc(n_layers * pairs);
    cr_assert(ls && map && want && ok);
    layers_of(&dst, &src, n_layers, bb, ls);
    if (map_in != NULL)
        memcpy(map, map_in, 2 * pairs * sizeof(*map));
    else
        bt_random_map(map, pairs, SRC_BLOCKS, DST_BLOCKS, seed, 5);
    expected(ls, n_layers, map, pairs, want, ok);
    struct gpu_args a = gpu_args_new(n_layers, pairs);
    GT_CHECK(tcu.cuMemcpyHtoD(a.map, map, a.map_bytes));
    GT_CHECK(tcu.cuMemsetD8(a.ws, 0xA5, a.ws_bytes)); /* every word must be written */
    GT_CHECK(tcu.cuCtxSynchronize());
    unsigned char *src_host = bt_host_copy(&src.pool);
    GT_OK(p2pt_copy_blocks_device_async(h, ls, n_layers, (const int64_t *)(uintptr_t)a.map,
                                        (uint32_t)pairs, (void *)(uintptr_t)a.ws, s));
    memset(ls, 0xEE, n_layers * sizeof(*ls)); /* read before the call returned */
    GT_CHECK(tcu.cuStreamSynchronize(s));
    char what[128];
    snprintf(what, sizeof(what), "%zu layers of %llu-byte blocks, %s to %s", n_layers,
             (unsigned long long)bb, host_src ? "host" : "GPU", host_dst ? "host" : "GPU");
    bt_expect(&dst.pool, &src.pool, src_host, want, n_layers * pairs, ok, what);
    uint32_t bad = 0, first = UINT32_MAX;
    for (size_t i = 0; i < n_layers * pairs; i++)
        if (!ok[i]) {
            bad++;
            first = first < i ? first : (uint32_t)i;
        }
    const p2pt_batch_status st = status_of(&a);
    cr_assert_eq(st.count, n_layers * pairs, "%s: count %u", what, st.count);
    cr_assert_eq(st.copied, n_layers * pairs - bad, "%s: copied %u", what, st.copied);
    cr_assert_eq(st.skipped, bad, "%s: skipped %u, expected %u", what, st.skipped, bad);
    cr_assert_eq(st.first_bad, first, "%s: first_bad %u, expected %u", what, st.first_bad, first);
    cr_assert_eq(st.reasons, bad ? P2PT_BATCH_SKIPPED_WINDOW : 0u, "%s: reasons %u", what,
                 st.reasons);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(st.reserved[k], 0u, "%s: reserved[%d] 0x%x", what, k, st.reserved[k]);
    free(src_host);
    free(ls);
    free(map);
    free(want);
    free(ok);
    gpu_args_free(&a);
    GT_OK(p2pt_window_unregister(h, 0, (void *)(uintptr_t)dst.pool.base));
    GT_OK(p2pt_window_unregister(h, 0, (void *)(uintptr_t)src.pool.base));
    gt_free(&dst.pool);
    gt_free(&src.pool);
}

Test(blocks_device_gpu, blocks_land_where_the_mapping_in_gpu_memory_says)
{
    const struct gpu_case c = gpu_case_open();
    p2pt_handle *h = c.h;
    CUstream s = c.s;
    static const uint64_t sizes[] = {16384, 4144, 4100, 24};
    static const size_t layer_counts[] = {3, 70};
    /* GPU to GPU, offload (GPU to pinned host), restore (back). */
    static const bool host_dst[] = {false, true, false}, host_src[] = {false, false, true};
    uint64_t seed = 1;
    for (size_t i = 0; i < P2PT_ARRAY_LEN(sizes); i++)
        for (size_t k = 0; k < P2PT_ARRAY_LEN(layer_counts); k++)
            for (size_t w = 0; w < P2PT_ARRAY_LEN(host_dst); w++)
                one_call(h, s, sizes[i], layer_counts[k], host_dst[w], host_src[w], NULL, 17,
                         seed++);
    gpu_case_close(c);
}

Test(blocks_device_gpu, ids_outside_their_layer_are_skipped_counted_and_touch_nothing)
{
    const struct gpu_case c = gpu_case_open();
    p2pt_handle *h = c.h;
    CUstream s = c.s;
    /* 20 source blocks, 24 destination blocks a layer (one_call). */
    const int64_t map[] = {0,  5,           /* good */
                           3,  24,          /* dst == blocks */
                           7,  2,           /* good */
                           -1, 9,           /* negative src */
                           20, 10,          /* src == blocks */
                           4,  -5,          /* negative dst */
                           INT64_MAX, 11,   /* huge src */
                           2,  INT64_MIN,   /* huge negative dst */
                           (int64_t)1 << 40, (int64_t)1 << 41, /* past any address */
                           19, 23};         /* good, the last of each */
    const size_t pairs = P2PT_ARRAY_LEN(map) / 2;
    one_call(h, s, 4100, 3, false, false, map, pairs, 77);
    one_call(h, s, 24, 70, true, false, map, pairs, 78);
    gpu_case_close(c);
}

Test(blocks_device_gpu, a_layer_outside_every_window_is_skipped_and_untouched)
{
    const struct gpu_case c = gpu_case_open();
    p2pt_handle *h = c.h;
    CUstream s = c.s;
    const uint64_t bb = 4144;
    const size_t pairs = 6, layers = 3;
    struct side dst = side_new(false, layers, 8, bb), src = side_new(false, layers, 8, bb);
    struct gt_buf outside = gt_alloc(8 * bb); /* layer 1's dst: never a window */
    windows(h, &dst, &src);
    gt_fill(&src.pool, 9);
    gt_poison(&dst.pool);
    p2pt_block_layer ls[3];
    layers_of(&dst, &src, layers, bb, ls);
    ls[1].dst = (void *)(uintptr_t)outside.ptr;
    int64_t map[12];
    bt_random_map(map, pairs, 8, 8, 9, 5);
    p2pt_copy_desc want[18];
    bool ok[18];
    expected(ls, layers, map, pairs, want, ok);
    for (size_t r = 0; r < pairs; r++)
        ok[pairs + r] = false;
    struct gpu_args a = gpu_args_new(layers, pairs);
    GT_CHECK(tcu.cuMemcpyHtoD(a.map, map, a.map_bytes));
    unsigned char *src_host = bt_host_copy(&src.pool);
    GT_OK(p2pt_copy_blocks_device_async(h, ls, layers, (const int64_t *)(uintptr_t)a.map,
                                        (uint32_t)pairs, (void *)(uintptr_t)a.ws, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    bt_expect(&dst.pool, &src.pool, src_host, want, layers * pairs, ok, "layers 0 and 2");
    gt_expect_range(&outside, 0, &outside, 0, 0, "layer 1, outside every window");
    const p2pt_batch_status st = status_of(&a);
    cr_assert_eq(st.skipped, pairs, "skipped %u", st.skipped);
    cr_assert_eq(st.copied, 2 * pairs, "copied %u", st.copied);
    cr_assert_eq(st.first_bad, pairs, "first_bad %u", st.first_bad);
    cr_assert_eq(st.reasons, P2PT_BATCH_SKIPPED_WINDOW);
    free(src_host);
    gpu_args_free(&a);
    gt_free(&outside);
    gt_free(&dst.pool);
    gt_free(&src.pool);
    gpu_case_close(c);
}

/* Captured once: the mapping copied into place from a staging buffer
 * (work on the stream before the call, as a scheduler's kernel would
 * write it), then the blocks. Each replay gets new rows in the staging
 * buffer and must move exactly them. */
Test(blocks_device_gpu, a_captured_graph_reads_new_mapping_rows_at_every_replay)
{
    const struct gpu_case c = gpu_case_open();
    cr_assert_not_null(tcu.cuStreamBeginCapture, "driver lacks stream capture");
    p2pt_handle *h = c.h;
    CUstream s = c.s;
    GT_OK(p2pt_prepare(h, 0));
    enum { LAYERS = 70, PAIRS = 13, DST_BLOCKS = 16, SRC_BLOCKS = 16 };
    const uint64_t bb = 4100;
    struct side dst = side_new(false, LAYERS, DST_BLOCKS, bb),
                src = side_new(true, LAYERS, SRC_BLOCKS, bb);
    windows(h, &dst, &src);
    p2pt_block_layer ls[LAYERS];
    layers_of(&dst, &src, LAYERS, bb, ls);
    struct gpu_args a = gpu_args_new(LAYERS, PAIRS);
    CUdeviceptr staged;
    GT_CHECK(tcu.cuMemAlloc(&staged, a.map_bytes));
    int64_t map[2 * PAIRS];
    bt_random_map(map, PAIRS, SRC_BLOCKS, DST_BLOCKS, 100, 5);
    GT_CHECK(tcu.cuMemcpyHtoD(staged, map, a.map_bytes));

    GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    GT_CHECK(tcu.cuMemcpyAsync(a.map, staged, a.map_bytes, s));
    GT_OK(p2pt_copy_blocks_device_async(h, ls, LAYERS, (const int64_t *)(uintptr_t)a.map, PAIRS,
                                        (void *)(uintptr_t)a.ws, s));
    CUgraph graph;
    CUgraphExec ge;
    GT_CHECK(tcu.cuStreamEndCapture(s, &graph));
    GT_CHECK(tcu.cuGraphInstantiateWithFlags(&ge, graph, 0));

    static p2pt_copy_desc want[LAYERS * PAIRS];
    static bool ok[LAYERS * PAIRS];
    for (int replay = 0; replay < 5; replay++) {
        bt_random_map(map, PAIRS, SRC_BLOCKS, DST_BLOCKS, 200 + (uint64_t)replay, 5);
        if (replay == 3)
            map[2 * 5 + 1] = DST_BLOCKS; /* one bad row: piece 5 of each layer */
        GT_CHECK(tcu.cuMemcpyHtoD(staged, map, a.map_bytes));
        gt_fill(&src.pool, 300 + (uint64_t)replay);
        gt_poison(&dst.pool);
        GT_CHECK(tcu.cuMemsetD8(a.ws, 0xA5, a.ws_bytes));
        GT_CHECK(tcu.cuCtxSynchronize());
        layers_of(&dst, &src, LAYERS, bb, ls);
        expected(ls, LAYERS, map, PAIRS, want, ok);
        unsigned char *src_host = bt_host_copy(&src.pool);
        GT_CHECK(tcu.cuGraphLaunch(ge, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        char what[64];
        snprintf(what, sizeof(what), "replay %d", replay);
        bt_expect(&dst.pool, &src.pool, src_host, want, LAYERS * PAIRS, ok, what);
        const p2pt_batch_status st = status_of(&a);
        const uint32_t bad = replay == 3 ? LAYERS : 0;
        cr_assert_eq(st.count, LAYERS * PAIRS, "%s: count %u", what, st.count);
        cr_assert_eq(st.skipped, bad, "%s: skipped %u", what, st.skipped);
        cr_assert_eq(st.copied, LAYERS * PAIRS - bad, "%s: copied %u", what, st.copied);
        cr_assert_eq(st.first_bad, bad ? 5u : UINT32_MAX, "%s: first_bad %u", what,
                     st.first_bad);
        cr_assert_eq(st.reserved[0] | st.reserved[1] | st.reserved[2], 0u);
        free(src_host);
    }
    tcu.cuGraphExecDestroy(ge);
    tcu.cuGraphDestroy(graph);
    tcu.cuMemFree(staged);
    gpu_args_free(&a);
    gt_free(&dst.pool);
    gt_free(&src.pool);
    gpu_case_close(c);
}
