/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Finding a device and entering a context for it: for prepare, the peer
 * helpers and shared memory, which take a device ordinal rather than a
 * stream.
 */
#include "driver.h"

p2pt_status p2pt__check_device(int device, const char *what)
{
    p2pt_status st = P2PT_SUCCESS;
    int count = 0;
    P2PT_CU(p2pt__cu.cuDeviceGetCount(&count));
    if (device < 0 || device >= count)
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "%s %d does not exist: %d CUDA device%s visible (0..%d)", what,
                        device, count, count == 1 ? " is" : "s are", count - 1);
out:
    return st;
}

p2pt_status p2pt__ctx_enter(int device, CUcontext *ctx, bool *pushed)
{
    p2pt_status st = P2PT_SUCCESS;
    CUdevice dev;
    CUcontext cur = NULL;

    *pushed = false;
    P2PT_TRY(p2pt__check_device(device, "device"));
    P2PT_CU(p2pt__cu.cuDeviceGet(&dev, device));
    P2PT_CU(p2pt__cu.cuCtxGetCurrent(&cur));
    if (cur != NULL) {
        CUdevice cur_dev;
        P2PT_CU(p2pt__cu.cuCtxGetDevice(&cur_dev));
        if (cur_dev == dev) {
            *ctx = cur;
            goto out;
        }
    }
    /* The primary context, retained and never released: it must outlive the
     * module p2pt loads into it, and frameworks keep it alive anyway. */
    P2PT_CU(p2pt__cu.cuDevicePrimaryCtxRetain(ctx, dev));
    P2PT_CU(p2pt__cu.cuCtxPushCurrent(*ctx));
    *pushed = true;
out:
    return st;
}

void p2pt__ctx_leave(bool pushed)
{
    if (pushed) {
        CUcontext popped;
        p2pt__cu.cuCtxPopCurrent(&popped);
    }
}

p2pt_status p2pt__ctx_enter_primary(int device, CUcontext *ctx, bool *pushed)
{
    p2pt_status st = P2PT_SUCCESS;
    CUdevice dev;

    *pushed = false;
    P2PT_TRY(p2pt__check_device(device, "device"));
    P2PT_CU(p2pt__cu.cuDeviceGet(&dev, device));
    /* Retained and never released, as p2pt__ctx_enter does. */
    P2PT_CU(p2pt__cu.cuDevicePrimaryCtxRetain(ctx, dev));
    P2PT_CU(p2pt__cu.cuCtxPushCurrent(*ctx));
    *pushed = true;
out:
    return st;
}
