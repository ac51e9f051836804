/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How often a host batch's descriptors are read. A batch of 16,384 pieces
 * is 384 KiB of descriptors, so each pass over them is most of what the
 * call costs the host beyond its fixed calls. Over the fake driver
 * (tests/fault/fake_cuda.c), a host batch through the pipeline is read
 * once under a fixed engine, whichever, real run or dry run; under auto
 * twice (the table picks the engine by mean piece size, so the pieces are
 * summed before routing, then the engine makes its own pass), except when
 * the sums come with the batch: pieces built from blocks
 * (p2pt_copy_blocks_async) are read once under auto too.
 */
#include <criterion/criterion.h>
#include <string.h>

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
    if (blocks) { /* the same pieces as blocks: one layer, block i to block i */
        struct p2pt_block_pieces p = {d, PIECES, PIECES, PIECES, PIECES * PIECE, true};
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

Test(batch_passes, auto_sums_the_pieces_before_it_routes_then_the_engine_reads_them)
{
    require_fake_driver();
#ifdef P2PT_FAKE_CUDA_PATH
    cr_expect_eq(passes("auto", false, false), 2);
    cr_expect_eq(passes("auto", true, false), 2);
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
