/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA driver, reached at run time (cuda_loader.c): the table of the
 * entry points the library itself calls, the check macro every driver call
 * goes through, and context helpers (context.c). Tests and the benchmark
 * fetch the entries only they use into a table of their own
 * (support/test_driver.c) through p2pt__cuda_proc, so the library does not
 * refuse a driver for lacking an entry it never calls.
 */
#ifndef P2PT_DRIVER_H
#define P2PT_DRIVER_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "common.h"

struct p2pt_cuda {
    PFN_cuInit_v2000 cuInit;
    PFN_cuDriverGetVersion_v2020 cuDriverGetVersion;
    PFN_cuGetErrorName_v6000 cuGetErrorName;
    PFN_cuGetErrorString_v6000 cuGetErrorString;
    PFN_cuDeviceGet_v2000 cuDeviceGet;
    PFN_cuDeviceGetCount_v2000 cuDeviceGetCount;
    PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute;
    PFN_cuDeviceGetName_v2000 cuDeviceGetName;
    PFN_cuDeviceCanAccessPeer_v4000 cuDeviceCanAccessPeer;
    PFN_cuDeviceGetP2PAttribute_v8000 cuDeviceGetP2PAttribute;
    PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain;
    PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent;
    PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent;
    PFN_cuCtxPushCurrent_v4000 cuCtxPushCurrent;
    PFN_cuCtxPopCurrent_v4000 cuCtxPopCurrent;
    PFN_cuCtxGetDevice_v2000 cuCtxGetDevice;
    PFN_cuCtxGetId_v12000 cuCtxGetId;
    PFN_cuCtxEnablePeerAccess_v4000 cuCtxEnablePeerAccess;
    PFN_cuStreamGetCtx_v9020 cuStreamGetCtx;
    PFN_cuStreamIsCapturing_v10000 cuStreamIsCapturing;
    PFN_cuMemcpyAsync_v4000 cuMemcpyAsync;
    PFN_cuPointerGetAttribute_v4000 cuPointerGetAttribute;
    PFN_cuPointerGetAttributes_v7000 cuPointerGetAttributes;
    PFN_cuModuleLoadData_v2000 cuModuleLoadData;
    PFN_cuModuleUnload_v2000 cuModuleUnload;
    PFN_cuModuleGetFunction_v2000 cuModuleGetFunction;
    PFN_cuFuncSetAttribute_v9000 cuFuncSetAttribute;
    PFN_cuLaunchKernel_v4000 cuLaunchKernel;
    /* Optional (NULL when the driver lacks it): programmatic dependent
     * launch for the TMA kernel, without which p2pt launches plainly; the
     * driver's batched copy (CUDA 13.0's entry, else 12.8's), without which
     * the ce transport loops over cuMemcpyAsync. */
    PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx;
    PFN_cuMemcpyBatchAsync_v13000 cuMemcpyBatchAsync;
    PFN_cuMemcpyBatchAsync_v12080 cuMemcpyBatchAsync_v12080;
    /* Optional: the copy engine's 2D copies for runs of equal pieces at
     * constant strides (coalesce.h): many in one call (13.0's entry, else
     * 12.8's), else one call each; without either, a copy per row. */
    PFN_cuMemcpy2DAsync_v3020 cuMemcpy2DAsync;
    PFN_cuMemcpy3DBatchAsync_v13000 cuMemcpy3DBatchAsync;
    PFN_cuMemcpy3DBatchAsync_v12080 cuMemcpy3DBatchAsync_v12080;
    /* Optional: the TMA transport's staging ring for host descriptors
     * (transport_tma_ring.c); without every one of them host batches travel
     * in the kernel parameters alone. */
    PFN_cuMemAllocHost_v3020 cuMemAllocHost;
    PFN_cuMemFreeHost_v2000 cuMemFreeHost;
    PFN_cuMemAlloc_v3020 cuMemAlloc;
    PFN_cuMemFree_v3020 cuMemFree;
    PFN_cuMemcpyHtoDAsync_v3020 cuMemcpyHtoDAsync;
    PFN_cuEventCreate_v2000 cuEventCreate;
    PFN_cuEventRecord_v2000 cuEventRecord;
    PFN_cuEventQuery_v2000 cuEventQuery;
    PFN_cuEventSynchronize_v2000 cuEventSynchronize;
    /* Optional: the ring's calls made relaxed while another stream captures
     * (without it they keep the thread's mode). */
    PFN_cuThreadExchangeStreamCaptureMode_v10010 cuThreadExchangeStreamCaptureMode;
    /* Optional: memory shared between processes (src/share/). Legacy IPC
     * handles for cuMemAlloc memory; POSIX file descriptors of VMM
     * allocations and of memory pools, imported and mapped; the GPU's UUID
     * a blob carries; the events and context waits by which a close waits
     * for the work queued on a window. Without one of them the share call
     * that needs it is status 6. */
    PFN_cuDeviceGetUuid_v11040 cuDeviceGetUuid;
    PFN_cuCtxSynchronize_v2000 cuCtxSynchronize;
    PFN_cuEventDestroy_v4000 cuEventDestroy;
    PFN_cuMemGetAddressRange_v3020 cuMemGetAddressRange;
    PFN_cuIpcGetMemHandle_v4010 cuIpcGetMemHandle;
    PFN_cuIpcOpenMemHandle_v11000 cuIpcOpenMemHandle;
    PFN_cuIpcCloseMemHandle_v4010 cuIpcCloseMemHandle;
    PFN_cuMemRetainAllocationHandle_v11000 cuMemRetainAllocationHandle;
    PFN_cuMemGetAllocationPropertiesFromHandle_v10020 cuMemGetAllocationPropertiesFromHandle;
    PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle;
    PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle;
    PFN_cuMemRelease_v10020 cuMemRelease;
    PFN_cuMemAddressReserve_v10020 cuMemAddressReserve;
    PFN_cuMemAddressFree_v10020 cuMemAddressFree;
    PFN_cuMemMap_v10020 cuMemMap;
    PFN_cuMemUnmap_v10020 cuMemUnmap;
    PFN_cuMemSetAccess_v10020 cuMemSetAccess;
    PFN_cuMemPoolExportToShareableHandle_v11020 cuMemPoolExportToShareableHandle;
    PFN_cuMemPoolExportPointer_v11020 cuMemPoolExportPointer;
    PFN_cuMemPoolImportFromShareableHandle_v11020 cuMemPoolImportFromShareableHandle;
    PFN_cuMemPoolImportPointer_v11020 cuMemPoolImportPointer;
    PFN_cuMemPoolSetAccess_v11020 cuMemPoolSetAccess;
    PFN_cuMemPoolDestroy_v11020 cuMemPoolDestroy;
};

/* The table, valid after p2pt__cuda_load succeeded. */
P2PT_INTERNAL extern struct p2pt_cuda p2pt__cu;

/*
 * Open the driver library at `path` (default "libcuda.so.1"), fetch every
 * entry point and call cuInit(0). Done once per process; later calls return
 * the first outcome again (and its text). P2PT_NO_DRIVER when the library is
 * missing, is not a CUDA driver, is the toolkit's stub, or cuInit fails.
 */
P2PT_INTERNAL p2pt_status p2pt__cuda_load(const char *path);
/* Entry point `name` at ABI `version` from the loaded driver (NULL when the
 * driver lacks it or is not loaded): for the tests' and benchmark's tables. */
P2PT_INTERNAL void *p2pt__cuda_proc(const char *name, int version);
/* "CUDA_ERROR_X" for a CUresult, also before the driver loaded. */
P2PT_INTERNAL const char *p2pt__cuda_error_name(CUresult r);
/* Record a failed driver call: "<call> failed: CUDA_ERROR_X (text) at file:line". */
P2PT_INTERNAL p2pt_status p2pt__cuda_fail(CUresult r, const char *call, const char *file,
                                          int line);

/*
 * Check a driver call. Needs `p2pt_status st` and a label `out` in scope: on
 * failure records the call text, the error name and file:line, and jumps to
 * the one cleanup label (the STYLE.md habit).
 */
#define P2PT_CU(call)                                                          \
    do {                                                                       \
        CUresult cu_r_ = (call);                                               \
        if (cu_r_ != CUDA_SUCCESS) {                                           \
            st = p2pt__cuda_fail(cu_r_, #call, __FILE__, __LINE__);            \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* P2PT_CU for a result already in hand: `call` is the text of the driver
 * call that returned it, so the message names the entry that failed. */
#define P2PT_CU_RESULT(result, call)                                           \
    do {                                                                       \
        CUresult cu_r_ = (result);                                             \
        if (cu_r_ != CUDA_SUCCESS) {                                           \
            st = p2pt__cuda_fail(cu_r_, call, __FILE__, __LINE__);             \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* ----------------------------------------------------------------- context.c */

/* P2PT_INVALID_ARGUMENT naming `what` and `device` unless the driver sees
 * that device. */
P2PT_INTERNAL p2pt_status p2pt__check_device(int device, const char *what);
/* The current context, or the primary context of `device` made current when
 * the thread has none for it; *pushed tells whether to pop. */
P2PT_INTERNAL p2pt_status p2pt__ctx_enter(int device, CUcontext *ctx, bool *pushed);
P2PT_INTERNAL void p2pt__ctx_leave(bool pushed);
/* The primary context of `device`, pushed whatever is current (undo with
 * p2pt__ctx_leave(true) when *pushed): for memory that must be mapped there,
 * not in a context the caller happens to hold. */
P2PT_INTERNAL p2pt_status p2pt__ctx_enter_primary(int device, CUcontext *ctx, bool *pushed);

#endif /* P2PT_DRIVER_H */
