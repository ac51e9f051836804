/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Peer access helpers and the peer topology. p2pt never enables access
 * inside a copy; a framework calls these once, at setup.
 */
#include <string.h>

#include "driver.h"
#include "handles.h"

/* Give `from`'s primary context access to `to`'s. Caller restores the
 * current context. */
static p2pt_status enable_one_way(CUdevice from, CUdevice to)
{
    p2pt_status st = P2PT_SUCCESS;
    CUcontext from_ctx = NULL, to_ctx = NULL;
    int can = 0;

    P2PT_CU(p2pt__cu.cuDeviceCanAccessPeer(&can, from, to));
    if (!can) {
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "device %d cannot access device %d (cuDeviceCanAccessPeer "
                        "says no: no NVLink or PCIe peer path); copies between them "
                        "work only through the copy engine, staged through the host",
                        (int)from, (int)to);
        goto out;
    }
    /* Primary contexts are retained and kept: peer mappings live in them. */
    P2PT_CU(p2pt__cu.cuDevicePrimaryCtxRetain(&from_ctx, from));
    P2PT_CU(p2pt__cu.cuDevicePrimaryCtxRetain(&to_ctx, to));
    P2PT_CU(p2pt__cu.cuCtxSetCurrent(from_ctx));
    CUresult r = p2pt__cu.cuCtxEnablePeerAccess(to_ctx, 0);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
        P2PT_CU_RESULT(r, "p2pt__cu.cuCtxEnablePeerAccess(to_ctx, 0)");
out:
    return st;
}

p2pt_status p2pt_peer_enable(p2pt_handle *h, int dev_a, int dev_b)
{
    p2pt_status st = P2PT_SUCCESS;
    CUcontext saved = NULL;
    bool have_saved = false;

    P2PT_TRY(p2pt__check_handle(h, "p2pt_peer_enable"));
    P2PT_TRY(p2pt__check_device(dev_a, "dev_a"));
    P2PT_TRY(p2pt__check_device(dev_b, "dev_b"));
    if (dev_a == dev_b)
        goto out;
    P2PT_CU(p2pt__cu.cuCtxGetCurrent(&saved));
    have_saved = true;
    CUdevice a, b;
    P2PT_CU(p2pt__cu.cuDeviceGet(&a, dev_a));
    P2PT_CU(p2pt__cu.cuDeviceGet(&b, dev_b));
    P2PT_TRY(enable_one_way(a, b));
    P2PT_TRY(enable_one_way(b, a));
    P2PT_INFO(&h->log, "peer access enabled between devices %d and %d", dev_a, dev_b);
out:
    if (have_saved) {
        CUresult r = p2pt__cu.cuCtxSetCurrent(saved);
        if (r != CUDA_SUCCESS && st == P2PT_SUCCESS)
            st = p2pt__cuda_fail(r, "cuCtxSetCurrent(saved)", __FILE__, __LINE__);
    }
    return st;
}

p2pt_status p2pt_topology(p2pt_handle *h, p2pt_topology_t *topo)
{
    p2pt_status st = P2PT_SUCCESS;
    int count = 0;

    P2PT_TRY(p2pt__check_handle(h, "p2pt_topology"));
    if (topo == NULL || topo->size < sizeof(*topo))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_topology: topo is NULL or topo->size is below "
                          "sizeof(p2pt_topology_t) (%zu)",
                          sizeof(*topo));
    P2PT_CU(p2pt__cu.cuDeviceGetCount(&count));
    if (count > P2PT_TOPOLOGY_MAX_DEVICES) {
        st = p2pt__fail(P2PT_NOT_SUPPORTED, "%d devices; p2pt_topology reports at most %d",
                        count, P2PT_TOPOLOGY_MAX_DEVICES);
        goto out;
    }
    size_t size = topo->size;
    memset(topo, 0, sizeof(*topo));
    topo->size = size;
    topo->device_count = count;
    for (int i = 0; i < count; i++) {
        for (int j = 0; j < count; j++) {
            p2pt_peer_link *l = &topo->link[i][j];
            if (i == j) {
                l->can_access = 1;
                l->native_atomics = 1;
                continue;
            }
            int v = 0;
            P2PT_CU(p2pt__cu.cuDeviceCanAccessPeer(&v, i, j));
            l->can_access = v;
            P2PT_CU(p2pt__cu.cuDeviceGetP2PAttribute(
                &v, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, i, j));
            l->perf_rank = v;
            P2PT_CU(p2pt__cu.cuDeviceGetP2PAttribute(
                &v, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, i, j));
            l->native_atomics = v;
        }
    }
    /* Greedy islands: a device joins the first island all of whose members
     * it can reach both ways. */
    for (int i = 0; i < count; i++)
        topo->island[i] = -1;
    for (int i = 0; i < count; i++) {
        if (topo->island[i] >= 0)
            continue;
        int id = topo->island_count++;
        topo->island[i] = id;
        for (int j = i + 1; j < count; j++) {
            if (topo->island[j] >= 0)
                continue;
            bool fits = true;
            for (int k = 0; k < count && fits; k++)
                if (topo->island[k] == id &&
                    !(topo->link[k][j].can_access && topo->link[j][k].can_access))
                    fits = false;
            if (fits)
                topo->island[j] = id;
        }
    }
out:
    return st;
}
