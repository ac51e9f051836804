/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A host array the caller hands in (a batch's descriptors, a block
 * mapping, layer records) is read once: what the call checks is what it
 * moves, even when another thread of the caller changes the array during
 * the call (undefined for the caller, but it must not put an address the
 * checks never saw on the GPU). Over the fake driver, the array is changed
 * from inside the first driver call the library makes after reading it
 * (asking where a piece's memory lives), so the change lands exactly
 * between the read and any later one:
 *   - a piece that runs past the end of its allocation, shortened while its
 *     allocation is asked: still refused, nothing moved; a good piece
 *     lengthened past that end meanwhile: moved as read, nothing else;
 *   - blocks: a mapping row sent outside its layer and a layer's block size
 *     doubled while the first layer is asked: the blocks land where the
 *     checked mapping said, every other byte poison;
 *   - blocks by a mapping in GPU memory: a layer record changed while the
 *     mapping is checked: the expand launch carries the checked layer;
 *   - the semaphores a device batch signals, and a count exchange's puts
 *     and semaphores, changed to misaligned addresses while their memory
 *     is checked: the launch carries the addresses checked.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "batch_test.h"

#define PIECE 256

#ifdef P2PT_FAKE_CUDA_PATH
/* The change the spy makes, once, from the first pointer query for `at`
 * (0: any), and what the first launch carried: its parameters, `capture`
 * bytes of them (the size of the struct the test expects). */
static struct {
    CUdeviceptr at;
    void (*change)(void);
    bool changed;
    bool first_launch_seen;
    size_t capture;
    union {
        struct p2pt_expand_params expand;
        struct p2pt_batch_dev_params batch;
        struct p2pt_count_params count;
    } launched;
    struct p2pt_cuda real;
} spy;

static CUresult spy_attributes(unsigned n, CUpointer_attribute *attrs, void **data,
                               CUdeviceptr p)
{
    if (!spy.changed && (spy.at == 0 || p == spy.at)) {
        spy.changed = true;
        spy.change();
    }
    return spy.real.cuPointerGetAttributes(n, attrs, data, p);
}

static void first_launch(void **params)
{
    if (spy.first_launch_seen || params == NULL)
        return;
    spy.first_launch_seen = true;
    memcpy(&spy.launched, params[0], spy.capture);
}

static CUresult spy_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned smem, CUstream s, void **params,
                           void **extra)
{
    first_launch(params);
    return spy.real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
}

static CUresult spy_launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    first_launch(params);
    return spy.real.cuLaunchKernelEx(c, f, params, extra);
}

/* Watch the library's driver table (loaded at init) until spy_off. */
static void spy_on(CUdeviceptr at, void (*change)(void), size_t capture)
{
    memset(&spy, 0, sizeof(spy));
    spy.capture = capture;
    spy.real = p2pt__cu;
    spy.at = at;
    spy.change = change;
    p2pt__cu.cuPointerGetAttributes = spy_attributes;
    p2pt__cu.cuLaunchKernel = spy_launch;
    if (p2pt__cu.cuLaunchKernelEx != NULL)
        p2pt__cu.cuLaunchKernelEx = spy_launch_ex;
}

static void spy_off(void)
{
    p2pt__cu = spy.real;
}

/* The call watched ended (status `st`): the spy off, the change made from
 * the query about `asked`, the call a success, and something launched. */
static void launched_after(p2pt_status st, const char *asked)
{
    spy_off();
    cr_assert(spy.changed, "%s was not asked about", asked);
    cr_assert_eq(st, P2PT_SUCCESS, "%s", p2pt_last_error(NULL));
    cr_assert(spy.first_launch_seen, "nothing launched");
}

/* An address the first launch carried, against the one checked. */
static void expect_address(unsigned long long got, const void *checked, const char *what)
{
    cr_expect_eq(got, (uintptr_t)checked, "%s: launched %#llx, checked %p", what, got, checked);
}

/* ---------------------------------------------------------- descriptors */

static p2pt_copy_desc pieces[2];

static void shorten(void)
{
    pieces[0].bytes = 64;
}

static void lengthen(void)
{
    pieces[0].bytes = 4 * GT_GUARD;
}

static void a_piece_changed_while_asked(const char *transport)
{
    gt_use_fake_driver();
    p2pt_handle *h = gt_handle(transport);
    struct gt_buf dst = gt_alloc(4 * PIECE), src = gt_alloc(4 * PIECE);
    gt_fill(&src, 11);

    /* Past the end of dst's allocation (its guard included) by 156 bytes,
     * shortened to fit while the pass asks where it lives. */
    const CUdeviceptr end = dst.ptr + dst.n + GT_GUARD;
    pieces[0] = (p2pt_copy_desc){(void *)(uintptr_t)(end - 100), (const void *)(uintptr_t)src.ptr,
                                 PIECE};
    spy_on((CUdeviceptr)(uintptr_t)pieces[0].dst, shorten, 0);
    p2pt_status st = p2pt_copy_batch_async(h, pieces, 1, NULL);
    spy_off();
    cr_assert(spy.changed, "%s: the pass asked nothing about the piece's memory", transport);
    cr_assert_eq(pieces[0].bytes, 64, "the change was made");
    bt_expect_refusal(st, P2PT_INVALID_ARGUMENT, transport,
                      (const char *[]){"piece 0 of 1", "runs past the end of its allocation",
                                       "+256)", NULL});
    GT_CHECK(tcu.cuCtxSynchronize());
    gt_expect_range(&dst, 0, &src, 0, 0, "a refused piece moves nothing");

    /* A good piece lengthened past the allocation's end meanwhile: moved as
     * read, 256 bytes. */
    pieces[0] = (p2pt_copy_desc){(void *)(uintptr_t)dst.ptr, (const void *)(uintptr_t)src.ptr,
                                 PIECE};
    spy_on((CUdeviceptr)dst.ptr, lengthen, 0);
    st = p2pt_copy_batch_async(h, pieces, 1, NULL);
    spy_off();
    cr_assert(spy.changed);
    cr_assert_eq(st, P2PT_SUCCESS, "%s: a piece checked as read is refused as changed: %s",
                 transport, p2pt_last_error(NULL));
    GT_CHECK(tcu.cuCtxSynchronize());
    if (strcmp(transport, "ce") == 0) /* the fake driver's kernels move nothing */
        gt_expect_range(&dst, 0, &src, 0, PIECE, "the piece as read");
    p2pt_finalize(h);
    gt_free(&dst);
    gt_free(&src);
}

Test(caller_arrays, a_descriptor_changed_while_the_pass_asks_about_it_is_moved_or_refused_as_read)
{
    a_piece_changed_while_asked("ce");
    a_piece_changed_while_asked("tma");
}

/* --------------------------------------------------------------- blocks */

enum { LAYERS = 2, ROWS = 4, BLOCKS = 8, SLICE = BLOCKS * PIECE };

static int64_t mapping[2 * ROWS];
static p2pt_block_layer layers[LAYERS];

static void scramble(void)
{
    mapping[1] = BLOCKS + 1;          /* row 0's dst: past its layer, into layer 1's block 1 */
    layers[1].block_bytes = 2 * PIECE; /* pieces twice as long */
}

Test(caller_arrays, a_mapping_and_a_layer_changed_during_the_pass_move_as_checked)
{
    gt_use_fake_driver();
    p2pt_handle *h = gt_handle("ce");
    struct gt_buf dst = gt_alloc(LAYERS * SLICE), src = gt_alloc(LAYERS * SLICE);
    gt_fill(&src, 12);
    for (size_t l = 0; l < LAYERS; l++)
        layers[l] = (p2pt_block_layer){sizeof(layers[l]),
                                       (void *)(uintptr_t)(dst.ptr + l * SLICE),
                                       (const void *)(uintptr_t)(src.ptr + l * SLICE), PIECE,
                                       BLOCKS, BLOCKS};
    for (size_t r = 0; r < ROWS; r++)
        mapping[2 * r] = (int64_t)r, mapping[2 * r + 1] = (int64_t)(2 * r); /* even dst ids */
    spy_on(0, scramble, 0);
    p2pt_status st = p2pt_copy_blocks_async(h, layers, LAYERS, mapping, ROWS, NULL);
    spy_off();
    cr_assert(spy.changed, "the pass asked nothing of the driver");
    cr_assert_eq(st, P2PT_SUCCESS, "%s", p2pt_last_error(NULL));
    GT_CHECK(tcu.cuCtxSynchronize());

    /* Exactly the checked mapping's blocks: row r's src block r to dst
     * block 2r of each layer, poison in every odd block and the guards. */
    const size_t total = dst.n + 2 * GT_GUARD;
    unsigned char *want = malloc(total), *got = malloc(total), *from = malloc(src.n);
    cr_assert(want && got && from);
    memset(want, GT_POISON, total);
    gt_read(&src, from, src.ptr, src.n);
    for (size_t l = 0; l < LAYERS; l++)
        for (size_t r = 0; r < ROWS; r++)
            memcpy(want + GT_GUARD + l * SLICE + 2 * r * PIECE, from + l * SLICE + r * PIECE,
                   PIECE);
    gt_read(&dst, got, dst.base, total);
    size_t at = 0;
    while (at < total && got[at] == want[at])
        at++;
    cr_expect_eq(at, total, "dst byte %zu (from the payload's start: %ld) is 0x%02x, expected "
                 "0x%02x", at, (long)at - GT_GUARD, at < total ? got[at] : 0,
                 at < total ? want[at] : 0);
    free(want);
    free(got);
    free(from);
    p2pt_finalize(h);
    gt_free(&dst);
    gt_free(&src);
}

/* ------------------------------------------------- a mapping on the GPU */

static void move_layer(void)
{
    layers[0].dst = (char *)layers[0].dst + 16;
    layers[0].block_bytes = 0; /* which the check refuses */
}

Test(caller_arrays, a_layer_changed_after_the_check_of_a_gpu_mapping_is_launched_as_checked)
{
    gt_use_fake_driver();
    p2pt_handle *h = gt_handle("tma");
    struct gt_buf dst = gt_alloc(LAYERS * SLICE), src = gt_alloc(LAYERS * SLICE);
    struct gt_buf map = gt_alloc(ROWS * 2 * sizeof(int64_t));
    struct gt_buf ws = gt_alloc(p2pt_blocks_workspace_bytes(LAYERS, ROWS));
    for (size_t l = 0; l < LAYERS; l++)
        layers[l] = (p2pt_block_layer){sizeof(layers[l]),
                                       (void *)(uintptr_t)(dst.ptr + l * SLICE),
                                       (const void *)(uintptr_t)(src.ptr + l * SLICE), PIECE,
                                       BLOCKS, BLOCKS};
    const p2pt_block_layer checked = layers[0];
    /* The validation of the mapping's memory asks the driver after the
     * layers were checked and before anything is launched. */
    spy_on((CUdeviceptr)map.ptr, move_layer, sizeof(struct p2pt_expand_params));
    launched_after(p2pt_copy_blocks_device_async(h, layers, LAYERS,
                                                 (const int64_t *)(uintptr_t)map.ptr, ROWS,
                                                 (void *)(uintptr_t)ws.ptr, NULL),
                   "the mapping's memory");
    const struct p2pt_expand_layer *got = &spy.launched.expand.layer[0];
    cr_expect_eq(got->bytes, checked.block_bytes,
                 "the expand launch carries block_bytes %llu, the checked layer %llu",
                 (unsigned long long)got->bytes, (unsigned long long)checked.block_bytes);
    expect_address(got->dst, checked.dst, "the expand launch's layer 0 dst");
    p2pt_finalize(h);
    gt_free(&ws);
    gt_free(&map);
    gt_free(&dst);
    gt_free(&src);
}

/* ------------------------------------------------ semaphores and puts */

static void *sems[2], *puts_[2];

static void misalign(void)
{
    sems[0] = (char *)sems[0] + 8;
    puts_[0] = (char *)puts_[0] + 4;
}

Test(caller_arrays, semaphores_and_puts_changed_during_their_checks_are_launched_as_checked)
{
    gt_use_fake_driver();
    p2pt_handle *h = gt_handle("tma");
    GT_OK(p2pt_prepare(h, 0));
    struct gt_buf sem = gt_alloc(2 * P2PT_SEMAPHORE_BYTES), put = gt_alloc(2 * 64);
    struct gt_buf descs = gt_alloc(4 * sizeof(p2pt_copy_desc)), count = gt_alloc(16);
    struct gt_buf ws = gt_alloc(p2pt_batch_workspace_bytes(4)), routing = gt_alloc(64);

    /* A device batch that signals: the buffers' check asks the driver
     * first, after the arguments' check found the semaphores aligned. */
    sems[0] = (void *)(uintptr_t)sem.ptr;
    sems[1] = (void *)(uintptr_t)(sem.ptr + P2PT_SEMAPHORE_BYTES);
    void *const checked = sems[0];
    spy_on(0, misalign, sizeof(struct p2pt_batch_dev_params));
    launched_after(p2pt_copy_batch_device_signal_async(
                       h, (const p2pt_copy_desc *)(uintptr_t)descs.ptr,
                       (const uint32_t *)(uintptr_t)count.ptr, 4, (void *)(uintptr_t)ws.ptr,
                       sems, 2, NULL),
                   "any memory");
    expect_address(spy.launched.batch.signal[0], checked, "the batch's signal 0");
    cr_expect_eq(spy.launched.batch.n_signals, 2);

    /* A count exchange: the routing's check asks first. */
    sems[0] = checked;
    puts_[0] = (void *)(uintptr_t)put.ptr;
    puts_[1] = (void *)(uintptr_t)(put.ptr + 64);
    void *const put_checked = puts_[0];
    spy_on((CUdeviceptr)routing.ptr, misalign, sizeof(struct p2pt_count_params));
    launched_after(p2pt_count_rows_async(h, (const void *)(uintptr_t)routing.ptr, 8, 2, NULL,
                                         puts_, 2, sems, 2, NULL),
                   "the routing's memory");
    expect_address(spy.launched.count.put[0], put_checked, "the count exchange's put 0");
    expect_address(spy.launched.count.signal[0], checked, "the count exchange's signal 0");
    p2pt_finalize(h);
    struct gt_buf *bufs[] = {&sem, &put, &descs, &count, &ws, &routing};
    for (size_t i = 0; i < P2PT_ARRAY_LEN(bufs); i++)
        gt_free(bufs[i]);
}
#else
Test(caller_arrays, needs_the_fake_driver)
{
    cr_skip_test("the fake driver is not built here (tests/fault/)");
}
#endif
