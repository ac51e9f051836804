/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Peer topology and peer access: p2pt_topology describes every device pair
 * consistently (runs on one GPU too); p2pt_peer_enable is idempotent, a no-op
 * for one device, rejects bad ordinals, and leaves the caller's current
 * context exactly as it found it on every path; after it, a TMA copy between
 * the two GPUs works. Both calls are also reachable through the plugin table.
 */
#include "gpu_test.h"
#include "p2pt_plugin.h"

Test(topology, describes_every_pair_and_groups_islands_consistently)
{
    gt_require_gpus(1);
    p2pt_handle *h = gt_handle("ce");
    p2pt_topology_t *t = calloc(1, sizeof(*t));
    t->size = sizeof(*t);
    GT_OK(p2pt_topology(h, t));
    int count = 0;
    GT_CHECK(tcu.cuDeviceGetCount(&count));
    cr_assert_eq(t->device_count, count);
    cr_assert(t->island_count >= 1 && t->island_count <= count);
    for (int i = 0; i < count; i++) {
        cr_assert_eq(t->link[i][i].can_access, 1);
        cr_assert(t->island[i] >= 0 && t->island[i] < t->island_count);
        for (int j = 0; j < count; j++) {
            int can = 0;
            if (i != j) {
                GT_CHECK(tcu.cuDeviceCanAccessPeer(&can, i, j));
                cr_assert_eq(t->link[i][j].can_access, can, "pair %d->%d", i, j);
            }
            if (i != j && t->island[i] == t->island[j])
                cr_assert(t->link[i][j].can_access && t->link[j][i].can_access,
                          "devices %d and %d share island %d but cannot reach each other",
                          i, j, t->island[i]);
        }
    }
    cr_log_info("%d device(s), %d island(s)", count, t->island_count);
    t->size = sizeof(size_t);
    cr_assert_eq(p2pt_topology(h, t), P2PT_INVALID_ARGUMENT, "a too-small struct is refused");
    cr_assert_eq(p2pt_plugin_v1.topology(h, NULL), P2PT_INVALID_ARGUMENT);
    free(t);
    p2pt_finalize(h);
}

Test(peer, enable_is_idempotent_and_restores_the_current_context)
{
    gt_require_gpus(1);
    p2pt_handle *h = gt_handle("ce");
    int count = 0;
    GT_CHECK(tcu.cuDeviceGetCount(&count));
    CUcontext cur = NULL;

    /* No current context before: none after, on success and on error. */
    GT_CHECK(tcu.cuCtxSetCurrent(NULL));
    GT_OK(p2pt_peer_enable(h, 0, 0));
    GT_CHECK(tcu.cuCtxGetCurrent(&cur));
    cr_assert_null(cur, "a no-op enable left a context current");
    cr_assert_eq(p2pt_peer_enable(h, 0, count + 5), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "does not exist") != NULL, "%s",
              p2pt_last_error(NULL));
    GT_CHECK(tcu.cuCtxGetCurrent(&cur));
    cr_assert_null(cur);
    if (count < 2) {
        p2pt_finalize(h);
        cr_skip_test("needs 2 CUDA devices for the two-device part: found %d", count);
    }

    /* A user context current before: the same one after, twice over. */
    CUdevice d1;
    CUcontext mine;
    GT_CHECK(tcu.cuDeviceGet(&d1, 1));
    GT_CHECK(tcu.cuCtxCreate(&mine, 0, d1));
    for (int round = 0; round < 2; round++) {
        GT_OK(p2pt_peer_enable(h, 0, 1));
        GT_OK(p2pt_plugin_v1.peer_enable(h, 1, 0));
        GT_CHECK(tcu.cuCtxGetCurrent(&cur));
        cr_assert_eq(cur, mine, "round %d: current context changed", round);
    }
    GT_CHECK(tcu.cuCtxDestroy(mine));

    /* After enabling, a TMA push copy from GPU 0 into GPU 1 works. */
    p2pt_handle *tma = gt_handle("tma");
    gt_use_device(1);
    struct gt_buf dst = gt_alloc(3 * 1024 * 1024 + 11);
    gt_use_device(0);
    struct gt_buf src = gt_alloc(3 * 1024 * 1024 + 11);
    gt_fill(&src, 77);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    GT_OK(p2pt_copy_async(tma, (void *)(dst.ptr + 1), (void *)(src.ptr + 1), src.n - 1, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    gt_expect_range(&dst, 1, &src, 1, src.n - 1, "tma push after p2pt_peer_enable");
    tcu.cuStreamDestroy(s);
    gt_free(&src);
    gt_free(&dst);
    p2pt_finalize(tma);
    p2pt_finalize(h);
}
