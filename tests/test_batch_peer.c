/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TMA batches between two GPUs: the pieces of an alltoallv step, host and
 * device descriptors alike, through the same kernel as local batches (a
 * peer's memory mapped into the stream's context is just another address
 * to it). Push: the stream and the sources on GPU 0, the destinations on
 * GPU 1; pull: the destinations on GPU 0, the sources on GPU 1. Random
 * sizes from 0 bytes to 40 KiB at random alignments (co-aligned or not),
 * every byte of the destination pool checked after poisoning, the gaps
 * between pieces included; the device batch's windows are registered on
 * GPU 0 over both pools. Skipped below two GPUs that reach each other.
 */
#include "batch_test.h"

enum { PEER_PIECES = 3000, PEER_MAX = 40000 };

/* A batch on a GPU 0 stream from a pool on `src_dev` into a pool on
 * `dst_dev`. */
static void peer_batch(int src_dev, int dst_dev, uint64_t seed)
{
    gt_require_gpus(2);
    gt_enable_peers();
    gt_use_device(src_dev);
    struct gt_buf src = gt_alloc(4u << 20);
    gt_fill(&src, seed);
    gt_use_device(dst_dev);
    struct gt_buf dst = gt_alloc(bt_pool_bytes(PEER_PIECES, PEER_MAX));
    gt_use_device(0);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    p2pt_copy_desc *d = malloc(PEER_PIECES * sizeof(*d));
    cr_assert_not_null(d);
    cr_assert(bt_layout(d, PEER_PIECES, &dst, &src, PEER_MAX, seed));
    p2pt_handle *h = gt_handle("tma");
    char what[64];
    snprintf(what, sizeof(what), "GPU%d -> GPU%d on a GPU0 stream", src_dev, dst_dev);
    bt_both_ways(h, 0, s, &dst, &src, d, PEER_PIECES, what);
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.tma_batches, 2u, "both batches ran as TMA batches");
    p2pt_finalize(h);
    free(d);
    tcu.cuStreamDestroy(s);
    gt_free(&dst);
    gt_free(&src);
}

Test(batch_peer, push_pieces_from_gpu0_into_gpu1)
{
    peer_batch(0, 1, 41);
}

Test(batch_peer, pull_pieces_from_gpu1_into_gpu0)
{
    peer_batch(1, 0, 42);
}
