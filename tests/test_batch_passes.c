/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How often a host batch's pieces are read. A batch of 16,384 pieces is
 * 384 KiB of descriptors, so each pass over them is most of what the call
 * costs the host beyond its fixed calls. Over the fake driver
 * (tests/fault/fake_cuda.c), every batch and every block set is read once,
 * by the pipeline's one pass, whatever takes it: under ce, tma and auto, in
 * real runs and dry runs; small enough for the kernel parameters, through
 * the staging ring, and more than one launch's worth without the ring (a
 * capturing stream); descriptors and blocks. Under auto the route may wait
 * for the pass (a table whose batch list changes engine with the mean piece
 * size, or a piece only the copy engine moves): the batch still goes where
 * its sums say, read once, nothing enqueued before. Each real run is
 * checked where it went: its engine's counters, its launches, and for the
 * copy engine, the bytes.
 */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "auto_test.h"
#include "batch_test.h"

#define PIECE 256

#ifdef P2PT_FAKE_CUDA_PATH
/* One shape of batch: `n` pieces (descriptors), or `layers` x `rows`
 * blocks; on a capturing stream or not. */
struct shape {
    const char *name;
    size_t n, layers, rows;
    bool capturing;
    /* The TMA engine's launches for it (one per 1344 pieces without the
     * ring). */
    unsigned tma_launches;
};

static const struct shape shapes[] = {
    {"64 descriptors (kernel parameters)", 64, 0, 0, false, 1},
    {"1024 descriptors (staging ring)", 1024, 0, 0, false, 1},
    {"3000 descriptors on a capturing stream (no ring, 3 launches)", 3000, 0, 0, true, 3},
    {"4 x 64 blocks (staging ring, as blocks)", 0, 4, 64, false, 1},
    {"8 x 256 blocks on a capturing stream (no ring, 2 launches)", 0, 8, 256, true, 2},
};

/* dst holds exactly the pieces d[0 .. n) copied from src, and poison in
 * every byte between them. */
static void expect_pieces(const struct gt_buf *dst, const struct gt_buf *src,
                          const p2pt_copy_desc *d, size_t n, const char *what)
{
    unsigned char *want = malloc(dst->n), *got = malloc(dst->n), *from = malloc(src->n);
    cr_assert(want && got && from);
    gt_read(dst, got, dst->ptr, dst->n);
    gt_read(src, from, src->ptr, src->n);
    memset(want, GT_POISON, dst->n);
    for (size_t i = 0; i < n; i++)
        memcpy(want + ((uintptr_t)d[i].dst - dst->ptr),
               from + ((uintptr_t)d[i].src - src->ptr), (size_t)d[i].bytes);
    size_t at = 0;
    while (at < dst->n && got[at] == want[at])
        at++;
    cr_expect_eq(at, dst->n, "%s: dst byte %zu is 0x%02x, expected 0x%02x", what, at,
                 at < dst->n ? got[at] : 0, at < dst->n ? want[at] : 0);
    free(want);
    free(got);
    free(from);
}

/*
 * After the pass, nothing reads the caller's pieces again: the first driver
 * call that enqueues (a launch or a copy, all after the pass) moves every
 * destination of the caller's descriptors, or of the blocks' mapping, one
 * piece on, into the gap after it. Every launch from the kernel parameters
 * must still carry the pieces as they were (a second read of the caller's
 * pieces, for a launch after the first, would carry the moved ones), and
 * the copy engine must still have copied them.
 */
static struct {
    bool on, moved, check_params;
    p2pt_copy_desc *d;
    size_t n;
    int64_t *map;
    size_t rows;
    CUdeviceptr dst;
    size_t launches, wrong; /* launches checked; pieces in them not as they were */
    struct p2pt_cuda real;
} spy;

static void move_pieces(void)
{
    if (!spy.on || spy.moved)
        return;
    spy.moved = true;
    for (size_t i = 0; i < spy.n; i++)
        spy.d[i].dst = (char *)spy.d[i].dst + PIECE;
    for (size_t r = 0; spy.map != NULL && r < spy.rows; r++)
        spy.map[2 * r + 1] += 1;
}

/* A launch from the kernel parameters of more than P2PT_BATCH_SMALL
 * pieces (every launch of the capturing shapes). */
static void check_params(void **params)
{
    if (!spy.on || !spy.check_params)
        return;
    const struct p2pt_batch_large *l = params[0];
    spy.launches++;
    for (unsigned i = 0; i < l->count; i++)
        spy.wrong += l->desc[i].bytes != PIECE || (l->desc[i].dst - spy.dst) % (2 * PIECE) != 0;
}

static CUresult spy_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned smem, CUstream s, void **params,
                           void **extra)
{
    check_params(params);
    move_pieces();
    return spy.real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
}

static CUresult spy_launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    check_params(params);
    move_pieces();
    return spy.real.cuLaunchKernelEx(c, f, params, extra);
}

static CUresult spy_copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    move_pieces();
    return spy.real.cuMemcpyAsync(dst, src, n, s);
}

static CUresult spy_batch(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count,
                          CUmemcpyAttributes *a, size_t *ai, size_t na, CUstream st)
{
    move_pieces();
    return spy.real.cuMemcpyBatchAsync(d, s, n, count, a, ai, na, st);
}

static CUresult spy_batch_12(CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count,
                             CUmemcpyAttributes *a, size_t *ai, size_t na, size_t *fail,
                             CUstream st)
{
    move_pieces();
    return spy.real.cuMemcpyBatchAsync_v12080(d, s, n, count, a, ai, na, fail, st);
}

static CUresult spy_2d(const CUDA_MEMCPY2D *c, CUstream s)
{
    move_pieces();
    return spy.real.cuMemcpy2DAsync(c, s);
}

static CUresult spy_3d(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
                       CUstream s)
{
    move_pieces();
    return spy.real.cuMemcpy3DBatchAsync(n, ops, flags, s);
}

static CUresult spy_3d_12(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
                          unsigned long long flags, CUstream s)
{
    move_pieces();
    return spy.real.cuMemcpy3DBatchAsync_v12080(n, ops, fail, flags, s);
}

/* Watch the library's enqueueing calls (its driver table, loaded at init). */
static void spy_on(void)
{
    spy.real = p2pt__cu;
#define SPY(entry, fn)                                                         \
    if (p2pt__cu.entry != NULL)                                                \
        p2pt__cu.entry = fn;
    SPY(cuLaunchKernel, spy_launch)
    SPY(cuLaunchKernelEx, spy_launch_ex)
    SPY(cuMemcpyAsync, spy_copy)
    SPY(cuMemcpyBatchAsync, spy_batch)
    SPY(cuMemcpyBatchAsync_v12080, spy_batch_12)
    SPY(cuMemcpy2DAsync, spy_2d)
    SPY(cuMemcpy3DBatchAsync, spy_3d)
    SPY(cuMemcpy3DBatchAsync_v12080, spy_3d_12)
#undef SPY
    spy.on = true;
}

static void spy_off(void)
{
    p2pt__cu = spy.real;
    memset(&spy, 0, sizeof(spy));
}

static p2pt_handle *fake_handle(const char *transport)
{
    gt_use_fake_driver();
    p2pt_init_args a = {sizeof(a), NULL, transport};
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt_init(&a, &h), P2PT_SUCCESS, "%s", p2pt_last_error(NULL));
    GT_OK(p2pt_prepare(h, 0)); /* before any capture */
    return h;
}

/* The passes one batch of shape `sh` over device memory takes under
 * `transport`, real (`dry` false) or explained, and what it did. */
static unsigned passes(const char *transport, bool dry, const struct shape *sh)
{
    p2pt_handle *h = fake_handle(transport);
    const size_t n = sh->n != 0 ? sh->n : sh->layers * sh->rows;
    /* Pieces apart (a gap after each), so no two merge into one copy. */
    struct gt_buf dst = gt_alloc(n * 2 * PIECE), src = gt_alloc(n * 2 * PIECE);
    gt_fill(&src, 7);
    gt_poison(&dst);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (sh->capturing)
        GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    p2pt_copy_desc *d = malloc(n * sizeof(*d));
    for (size_t i = 0; i < n; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(dst.ptr + 2 * i * PIECE),
                                (const void *)(uintptr_t)(src.ptr + 2 * i * PIECE), PIECE};
    struct p2pt_op op;
    p2pt_choice c = {sizeof(c)};
    p2pt__op_batch(&op, "p2pt_copy_batch_async", d, n, s);
    /* Blocks: layer l is a slice of each pool, block r of the mapping to
     * block r (blocks two apart in the pool: the ids are even). */
    p2pt_block_layer layers[8];
    int64_t *map = malloc(2 * (sh->rows + 1) * sizeof(*map));
    struct p2pt_block_pieces p;
    if (sh->layers != 0) {
        const size_t slice = 2 * sh->rows * PIECE;
        for (size_t l = 0; l < sh->layers; l++)
            layers[l] = (p2pt_block_layer){sizeof(layers[l]),
                                           (void *)(uintptr_t)(dst.ptr + l * slice),
                                           (const void *)(uintptr_t)(src.ptr + l * slice),
                                           PIECE, 2 * sh->rows, 2 * sh->rows};
        for (size_t r = 0; r < sh->rows; r++)
            map[2 * r] = map[2 * r + 1] = (int64_t)(2 * r);
        cr_assert_eq(p2pt__block_plan("p2pt_copy_blocks_async", layers, sh->layers, map,
                                      sh->rows, &p),
                     P2PT_SUCCESS, "%s", p2pt_last_error(NULL));
        cr_assert_null(p.descs, "layers apart stay blocks");
        p2pt__op_blocks(&op, "p2pt_copy_blocks_async", &p, s);
    }
    p2pt_copy_desc *was = malloc(n * sizeof(*was));
    for (size_t i = 0; i < n; i++)
        was[i] = d[i];
    p2pt_properties a = gt_props(h);
    spy_on();
    spy.d = d;
    spy.n = n;
    spy.map = sh->layers != 0 ? map : NULL;
    spy.rows = sh->rows;
    spy.dst = dst.ptr;
    spy.check_params = sh->capturing;
    cr_assert_eq(p2pt__op_run(h, &op, dry ? &c : NULL), P2PT_SUCCESS, "%s, %s, %s: %s",
                 transport, sh->name, dry ? "explained" : "real", p2pt_last_error(NULL));
    const size_t launches = spy.launches, wrong = spy.wrong;
    spy_off();
    p2pt_properties b = gt_props(h);
    const char *engine = c.transport;
    if (!dry) {
        engine = b.tma_batches > a.tma_batches ? "tma" : b.ce_batches > a.ce_batches ? "ce" : "?";
        cr_expect_eq(b.batch_pieces - a.batch_pieces, n, "%s, %s", transport, sh->name);
    }
    if (strcmp(transport, "auto") != 0)
        cr_expect_str_eq(engine, transport, "%s, %s", transport, sh->name);
    else
        cr_expect_str_eq(engine, "tma", "auto (its built-in batch list), %s", sh->name);
    if (!dry && strcmp(engine, "tma") == 0) {
        cr_expect_eq(b.kernel_launches - a.kernel_launches, sh->tma_launches, "%s, %s",
                     transport, sh->name);
        cr_expect_eq(launches, sh->capturing ? sh->tma_launches : 0, "%s, %s", transport,
                     sh->name);
        cr_expect_eq(wrong, 0, "%s, %s: %zu pieces launched as the caller's arrays read after "
                     "the pass", transport, sh->name, wrong);
    }
    if (!dry && strcmp(engine, "ce") == 0)
        expect_pieces(&dst, &src, was, n, sh->name);
    free(was);
    if (dry)
        cr_expect_eq(b.kernel_launches + b.ce_operations + b.batches,
                     a.kernel_launches + a.ce_operations + a.batches,
                     "a dry run enqueues and counts nothing");
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
    if (sh->layers != 0)
        p2pt__block_pieces_free(&p);
    free(d);
    free(map);
    gt_free(&dst);
    gt_free(&src);
    return op.batch.passes;
}
#endif

static void require_fake_driver(void)
{
#ifndef P2PT_FAKE_CUDA_PATH
    cr_skip_test("the fake driver is not built here (tests/fault/)");
#endif
}

static void each_shape_once(const char *transport)
{
#ifdef P2PT_FAKE_CUDA_PATH
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        for (int dry = 0; dry < 2; dry++)
            cr_expect_eq(passes(transport, dry, &shapes[k]), 1, "%s, %s, %s", transport,
                         shapes[k].name, dry ? "dry run" : "real run");
#else
    (void)transport;
#endif
}

Test(batch_passes, the_copy_engine_takes_every_batch_and_block_set_read_once)
{
    require_fake_driver();
    each_shape_once("ce");
}

Test(batch_passes, tma_takes_every_batch_and_block_set_read_once)
{
    require_fake_driver();
    each_shape_once("tma");
}

Test(batch_passes, auto_takes_every_batch_and_block_set_read_once)
{
    require_fake_driver();
    each_shape_once("auto");
}

#ifdef P2PT_FAKE_CUDA_PATH
/* One host batch under `h`, real or explained: its passes, and the engine
 * that ran it (from the counters) or that explain names. */
static unsigned mixed_passes(p2pt_handle *h, const p2pt_copy_desc *d, size_t n, bool dry,
                             const char **engine)
{
    struct p2pt_op op;
    p2pt_choice c = {sizeof(c)};
    p2pt_properties a = {sizeof(a)}, b = {sizeof(b)};
    GT_OK(p2pt_get_properties(h, &a));
    p2pt__op_batch(&op, "p2pt_copy_batch_async", d, n, NULL);
    cr_assert_eq(p2pt__op_run(h, &op, dry ? &c : NULL), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    GT_OK(p2pt_get_properties(h, &b));
    if (dry)
        *engine = c.transport;
    else
        *engine = b.tma_batches > a.tma_batches ? "tma" : b.ce_batches > a.ce_batches ? "ce" : "?";
    return op.batch.passes;
}
#endif

/* A table whose batch list changes engine at 1K: the route waits for the
 * pass, which finds the mean; a batch whose first piece lies on the other
 * side of 1K from its mean goes where the mean says, read once; nothing was
 * enqueued for the engine the first piece named. */
Test(batch_passes, auto_routes_on_the_sums_of_the_one_pass_where_one_piece_misleads)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    gt_use_fake_driver();
    char path[64], text[256], options[128];
    snprintf(text, sizeof(text),
             "p2pt-auto 1\narch sm_%d\ncopy local 0 tma\ncopy push 0 ce\ncopy pull 0 ce\n"
             "batch 0 ce\nbatch 1K tma\n",
             device_cc(0));
    table_file(path, text);
    snprintf(options, sizeof(options), "P2P_TRANSPORT_AUTO_TABLE=%s", path);
    p2pt_init_args args = {sizeof(args), NULL, "auto", options};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&args, &h));
    enum { N = 300 }; /* more than the parameters' small batch: the ring's slot is taken */
    struct gt_buf dst = gt_alloc(N * 4096), src = gt_alloc(N * 4096);
    gt_fill(&src, 3);
    static p2pt_copy_desc big_first[N], small_first[N], equal[N];
    for (size_t i = 0; i < N; i++) {
        void *to = (void *)(uintptr_t)(dst.ptr + i * 4096);
        const void *from = (const void *)(uintptr_t)(src.ptr + i * 4096);
        small_first[i] = (p2pt_copy_desc){to, from, i == 0 ? 256 : 4000}; /* mean ~4K: tma */
        big_first[i] = (p2pt_copy_desc){to, from, i == 0 ? 4000 : 256};   /* mean ~268: ce */
        equal[i] = (p2pt_copy_desc){to, from, 4000};
    }
    const char *engine = NULL;
    for (int dry = 0; dry < 2; dry++) {
        cr_expect_eq(mixed_passes(h, small_first, N, dry, &engine), 1);
        cr_expect_str_eq(engine, "tma", "a 256-byte piece first, mean about 4K (dry %d)", dry);
        gt_poison(&dst);
        cr_expect_eq(mixed_passes(h, big_first, N, dry, &engine), 1);
        cr_expect_str_eq(engine, "ce", "a 4K piece first, mean about 268 bytes (dry %d)", dry);
        if (!dry) { /* the copy engine grouped what the ring's slot held: every byte */
            expect_pieces(&dst, &src, big_first, N, "ce from the descriptors the pass left");
            /* ... into the operations its own pass makes of the same pieces */
            p2pt_handle *ce = gt_handle("ce");
            p2pt_properties a = gt_props(ce);
            GT_OK(p2pt_copy_batch_async(ce, big_first, N, NULL));
            const uint64_t own = gt_props(ce).ce_operations - a.ce_operations;
            p2pt_finalize(ce);
            cr_expect_eq(gt_props(h).ce_operations, own,
                         "groups made from the tma sink's descriptors: %llu operations, the "
                         "copy engine's own pass: %llu",
                         (unsigned long long)gt_props(h).ce_operations, (unsigned long long)own);
        }
        cr_expect_eq(mixed_passes(h, equal, N, dry, &engine), 1);
        cr_expect_str_eq(engine, "tma", "equal 4K pieces (dry %d)", dry);
    }
    p2pt_finalize(h);
    gt_free(&dst);
    gt_free(&src);
    unlink(path);
#endif
}

/* A batch whose first pieces are local, and then one of memory opened in
 * another device's context (a CUDA IPC handle), which no kernel on the
 * stream's device reaches: auto's route waits for the pass, which finds it
 * and sends the batch to the copy engine, read once. */
Test(batch_passes, auto_sends_a_batch_with_memory_only_the_copy_engine_moves_there_read_once)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    gt_use_fake_driver();
    gt_enable_peers();
    const size_t n = 1 << 20;
    CUdeviceptr owned, opened, local, other;
    CUipcMemHandle ipc;
    gt_use_device(1);
    GT_CHECK(tcu.cuMemAlloc(&owned, n));
    GT_CHECK(tcu.cuIpcGetMemHandle(&ipc, owned));
    GT_CHECK(tcu.cuIpcOpenMemHandle(&opened, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    gt_use_device(0);
    GT_CHECK(tcu.cuMemAlloc(&local, n));
    GT_CHECK(tcu.cuMemAlloc(&other, n));
    p2pt_copy_desc d[200];
    for (size_t i = 0; i < 200; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(other + i * 4096),
                                (const void *)(uintptr_t)(local + i * 4096), 1000};
    d[150].dst = (void *)(uintptr_t)(opened + 64);
    p2pt_handle *h = gt_handle("auto");
    const char *engine = NULL;
    for (int dry = 0; dry < 2; dry++) {
        cr_expect_eq(mixed_passes(h, d, 200, dry, &engine), 1, "dry %d", dry);
        cr_expect_str_eq(engine, "ce", "dry %d", dry);
    }
    cr_expect_eq(gt_props(h).kernel_launches, 0, "nothing went to a kernel");
    p2pt_finalize(h);
#endif
}
