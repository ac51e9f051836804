/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How often a host batch's descriptors are read. A batch of 16,384 pieces
 * is 384 KiB of descriptors, so each pass over them is most of what the
 * call costs the host beyond its fixed calls. Over the fake driver
 * (tests/fault/fake_cuda.c), a host batch through the pipeline is read
 * once under a fixed engine, whichever, real run or dry run, and once under
 * auto too: the table picks the engine by the mean piece size, which auto
 * takes from one piece and the engine's pass checks. Where the pass finds
 * the mean in another band, nothing has been enqueued, and the engine the
 * mean chooses makes a second pass: the batch goes where its mean says,
 * read twice. Pieces built from blocks (p2pt_copy_blocks_async) bring
 * their sums and are read once.
 */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "batch_test.h"

#define PIECES 64
#define PIECE 256

#ifdef P2PT_FAKE_CUDA_PATH
static p2pt_handle *fake_handle(const char *transport)
{
    gt_use_fake_driver();
    p2pt_init_args a = {sizeof(a), NULL, transport};
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt_init(&a, &h), P2PT_SUCCESS, "%s", p2pt_last_error(NULL));
    return h;
}

/* The passes one host batch of device memory takes, real (`dry` false) or
 * explained. */
static unsigned passes(const char *transport, bool dry, bool blocks)
{
    p2pt_handle *h = fake_handle(transport);
    struct gt_buf dst = gt_alloc(PIECES * PIECE), src = gt_alloc(PIECES * PIECE);
    p2pt_copy_desc d[PIECES];
    for (size_t i = 0; i < PIECES; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(dst.ptr + i * PIECE),
                                (const void *)(uintptr_t)(src.ptr + i * PIECE), PIECE};
    struct p2pt_op op;
    p2pt_choice c = {sizeof(c)};
    p2pt__op_batch(&op, "p2pt_copy_batch_async", d, PIECES, NULL);
    /* The same pieces as blocks: one layer, block i to block i, kept as
     * blocks by the plan (the layer's sides are apart). */
    p2pt_block_layer layer = {sizeof(layer), (void *)(uintptr_t)dst.ptr,
                              (const void *)(uintptr_t)src.ptr, PIECE, PIECES, PIECES};
    int64_t map[2 * PIECES];
    struct p2pt_block_pieces p;
    if (blocks) {
        for (size_t i = 0; i < PIECES; i++)
            map[2 * i] = map[2 * i + 1] = (int64_t)i;
        cr_assert_eq(p2pt__block_plan("p2pt_copy_blocks_async", &layer, 1, map, PIECES, &p),
                     P2PT_SUCCESS, "%s", p2pt_last_error(NULL));
        cr_assert_null(p.descs, "layers apart stay blocks");
        p2pt__op_blocks(&op, "p2pt_copy_blocks_async", &p, NULL);
    }
    cr_assert_eq(p2pt__op_run(h, &op, dry ? &c : NULL), P2PT_SUCCESS, "%s %s: %s", transport,
                 dry ? "explained" : "real", p2pt_last_error(NULL));
    p2pt_finalize(h);
    return op.batch.passes;
}
#endif

static void require_fake_driver(void)
{
#ifndef P2PT_FAKE_CUDA_PATH
    cr_skip_test("the fake driver is not built here (tests/fault/)");
#endif
}

Test(batch_passes, a_fixed_engine_reads_the_descriptors_once)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    const char *engines[] = {"ce", "tma"};
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(passes(engines[i], false, false), 1, "%s, real run", engines[i]);
        cr_expect_eq(passes(engines[i], true, false), 1, "%s, dry run", engines[i]);
        cr_expect_eq(passes(engines[i], false, true), 1, "%s, blocks", engines[i]);
    }
#endif
}

Test(batch_passes, auto_reads_a_batch_of_equal_pieces_once)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    cr_expect_eq(passes("auto", false, false), 1, "real run");
    cr_expect_eq(passes("auto", true, false), 1, "dry run");
#endif
}

Test(batch_passes, auto_reads_pieces_built_from_blocks_once)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    cr_expect_eq(passes("auto", false, true), 1, "real run");
    cr_expect_eq(passes("auto", true, true), 1, "dry run");
#endif
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

/* A table whose batch list changes engine at 1K: a batch whose one piece
 * auto looks at first lies on the other side of 1K from the batch's mean
 * goes where the mean says, at the cost of a second pass; nothing was
 * enqueued by the first. */
Test(batch_passes, auto_routes_again_on_the_sums_where_one_piece_misleads)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    gt_use_fake_driver();
    char path[64], text[256], options[128];
    CUdevice dev;
    int major = 0, minor = 0;
    GT_CHECK(tcu.cuDeviceGet(&dev, 0));
    GT_CHECK(tcu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    GT_CHECK(tcu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    snprintf(text, sizeof(text),
             "p2pt-auto 1\narch sm_%d%d\ncopy local 0 tma\ncopy push 0 ce\ncopy pull 0 ce\n"
             "batch 0 ce\nbatch 1K tma\n",
             major, minor);
    snprintf(path, sizeof(path), "/tmp/p2pt-passes-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    snprintf(options, sizeof(options), "P2P_TRANSPORT_AUTO_TABLE=%s", path);
    p2pt_init_args args = {sizeof(args), NULL, "auto", options};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&args, &h));
    struct gt_buf dst = gt_alloc(PIECES * 4096), src = gt_alloc(PIECES * 4096);
    p2pt_copy_desc big_first[PIECES], small_first[PIECES], equal[PIECES];
    for (size_t i = 0; i < PIECES; i++) {
        void *to = (void *)(uintptr_t)(dst.ptr + i * 4096);
        const void *from = (const void *)(uintptr_t)(src.ptr + i * 4096);
        small_first[i] = (p2pt_copy_desc){to, from, i == 0 ? 256 : 4096}; /* mean ~4K: tma */
        big_first[i] = (p2pt_copy_desc){to, from, i == 0 ? 4096 : 256};   /* mean ~316: ce */
        equal[i] = (p2pt_copy_desc){to, from, 4096};
    }
    const char *engine = NULL;
    for (int dry = 0; dry < 2; dry++) {
        cr_expect_eq(mixed_passes(h, small_first, PIECES, dry, &engine), 2);
        cr_expect_str_eq(engine, "tma", "a 256-byte piece first, mean about 4K (dry %d)", dry);
        cr_expect_eq(mixed_passes(h, big_first, PIECES, dry, &engine), 2);
        cr_expect_str_eq(engine, "ce", "a 4K piece first, mean about 316 bytes (dry %d)", dry);
        cr_expect_eq(mixed_passes(h, equal, PIECES, dry, &engine), 1);
        cr_expect_str_eq(engine, "tma", "equal 4K pieces (dry %d)", dry);
    }
    p2pt_finalize(h);
    gt_free(&dst);
    gt_free(&src);
    unlink(path);
#endif
}
