/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA driver, reached at run time: dlopen("libcuda.so.1") and one table
 * of entry points fetched with cuGetProcAddress, each at the ABI version its
 * function-pointer type names (NCCL's cudawrap pattern). Nothing links
 * libcuda, so libp2pt.so loads on a machine with no driver and says so.
 *
 * Loading happens once per process; the outcome (and its text) is kept and
 * handed to every later caller, so a missing driver is explained the same way
 * each time without retrying dlopen on every init.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"

struct p2pt_cuda p2pt__cu;

/* cuGetProcAddress of the loaded driver, kept for p2pt__cuda_proc. */
static PFN_cuGetProcAddress_v12000 proc_address;

struct entry {
    const char *name;
    int version;
    size_t offset;
    bool required; /* an optional one is NULL when the driver lacks it */
};

#define E(fn, ver) {#fn, ver, offsetof(struct p2pt_cuda, fn), true}
#define OPT(fn, ver) {#fn, ver, offsetof(struct p2pt_cuda, fn), false}
#define OPT_AS(name, field, ver) {#name, ver, offsetof(struct p2pt_cuda, field), false}
static const struct entry entries[] = {
    E(cuInit, 2000), E(cuDriverGetVersion, 2020), E(cuGetErrorName, 6000),
    E(cuGetErrorString, 6000), E(cuDeviceGet, 2000), E(cuDeviceGetCount, 2000),
    E(cuDeviceGetAttribute, 2000), E(cuDeviceGetName, 2000), E(cuDeviceCanAccessPeer, 4000),
    E(cuDeviceGetP2PAttribute, 8000), E(cuDevicePrimaryCtxRetain, 7000),
    E(cuCtxGetCurrent, 4000), E(cuCtxSetCurrent, 4000), E(cuCtxPushCurrent, 4000),
    E(cuCtxPopCurrent, 4000), E(cuCtxGetDevice, 2000), E(cuCtxGetId, 12000),
    E(cuCtxEnablePeerAccess, 4000), E(cuStreamGetCtx, 9020), E(cuStreamIsCapturing, 10000),
    E(cuMemcpyAsync, 4000), E(cuPointerGetAttribute, 4000), E(cuPointerGetAttributes, 7000),
    E(cuModuleLoadData, 2000), E(cuModuleUnload, 2000), E(cuModuleGetFunction, 2000),
    E(cuFuncSetAttribute, 9000), E(cuLaunchKernel, 4000), OPT(cuLaunchKernelEx, 11060),
    OPT(cuMemcpyBatchAsync, 13000), OPT_AS(cuMemcpyBatchAsync, cuMemcpyBatchAsync_v12080, 12080),
    OPT(cuMemcpy2DAsync, 3020), OPT(cuMemcpy3DBatchAsync, 13000),
    OPT_AS(cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_v12080, 12080),
    OPT(cuMemAllocHost, 3020), OPT(cuMemFreeHost, 2000), OPT(cuMemAlloc, 3020),
    OPT(cuMemFree, 3020), OPT(cuMemcpyHtoDAsync, 3020), OPT(cuEventCreate, 2000),
    OPT(cuEventRecord, 2000), OPT(cuEventQuery, 2000), OPT(cuEventSynchronize, 2000),
    OPT(cuThreadExchangeStreamCaptureMode, 10010),
    OPT(cuDeviceGetUuid, 11040), OPT(cuCtxSynchronize, 2000), OPT(cuEventDestroy, 4000),
    OPT(cuMemGetAddressRange, 3020), OPT(cuIpcGetMemHandle, 4010),
    OPT(cuIpcOpenMemHandle, 11000), OPT(cuIpcCloseMemHandle, 4010),
    OPT(cuMemRetainAllocationHandle, 11000), OPT(cuMemGetAllocationPropertiesFromHandle, 10020),
    OPT(cuMemExportToShareableHandle, 10020), OPT(cuMemImportFromShareableHandle, 10020),
    OPT(cuMemRelease, 10020), OPT(cuMemAddressReserve, 10020), OPT(cuMemAddressFree, 10020),
    OPT(cuMemMap, 10020), OPT(cuMemUnmap, 10020), OPT(cuMemSetAccess, 10020),
    OPT(cuMemPoolExportToShareableHandle, 11020), OPT(cuMemPoolExportPointer, 11020),
    OPT(cuMemPoolImportFromShareableHandle, 11020), OPT(cuMemPoolImportPointer, 11020),
    OPT(cuMemPoolSetAccess, 11020), OPT(cuMemPoolDestroy, 11020),
};
#undef E
#undef OPT
#undef OPT_AS

static struct p2pt_once load_once = P2PT_ONCE_INIT;

/* Names of the results a user is likely to meet, known even when the driver
 * (or its stub, whose cuGetErrorName also fails) cannot tell. */
const char *p2pt__cuda_error_name(CUresult r)
{
    switch ((int)r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED: return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: return "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED";
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
    case CUDA_ERROR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case CUDA_ERROR_ALREADY_MAPPED: return "CUDA_ERROR_ALREADY_MAPPED";
    case CUDA_ERROR_MAP_FAILED: return "CUDA_ERROR_MAP_FAILED";
    case CUDA_ERROR_TOO_MANY_PEERS: return "CUDA_ERROR_TOO_MANY_PEERS";
    case CUDA_ERROR_NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED";
    }
    const char *name = NULL;
    if (p2pt__cu.cuGetErrorName != NULL &&
        p2pt__cu.cuGetErrorName(r, &name) == CUDA_SUCCESS && name != NULL)
        return name;
    return "CUDA_ERROR_UNKNOWN_CODE";
}

static p2pt_status load_locked(const char *path)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        /* The default name: the driver is missing; another: the setting is. */
        bool named = strcmp(path, "libcuda.so.1") != 0;
        return p2pt__fail(P2PT_NO_DRIVER, "cannot load the CUDA driver library %s: %s (%s)",
                          path, why ? why : "unknown dlopen error",
                          named ? "P2P_CUDA_LIBRARY names this path; point it at the "
                                  "driver's libcuda.so.1, or unset it for the default"
                                : "is the NVIDIA driver installed? P2P_CUDA_LIBRARY can "
                                  "name another path");
    }
    PFN_cuGetProcAddress_v12000 gpa =
        (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
    if (gpa == NULL) {
        bool is_driver = dlsym(lib, "cuInit") != NULL;
        dlclose(lib);
        if (!is_driver)
            return p2pt__fail(P2PT_NO_DRIVER,
                              "%s is not a CUDA driver library (it has no cuInit); "
                              "P2P_CUDA_LIBRARY must name the NVIDIA driver's "
                              "libcuda.so.1",
                              path);
        return p2pt__fail(P2PT_NO_DRIVER,
                          "the CUDA driver library %s has no cuGetProcAddress_v2: "
                          "driver older than CUDA 12.0; p2pt needs 12.0 or newer",
                          path);
    }
    struct p2pt_cuda table;
    memset(&table, 0, sizeof(table));
    for (size_t i = 0; i < P2PT_ARRAY_LEN(entries); i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
        CUresult r = gpa(entries[i].name, &fn, entries[i].version,
                         CU_GET_PROC_ADDRESS_DEFAULT, &found);
        if (r == CUDA_ERROR_STUB_LIBRARY) {
            dlclose(lib);
            return p2pt__fail(P2PT_NO_DRIVER,
                              "%s is the CUDA toolkit's stub library "
                              "(CUDA_ERROR_STUB_LIBRARY): it lets programs link but "
                              "runs nothing; put the real driver's libcuda.so.1 "
                              "first in the library path",
                              path);
        }
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_FOUND && entries[i].required) {
            /* The lookup itself failed: the driver may well have the entry. */
            dlclose(lib);
            return p2pt__fail(P2PT_NO_DRIVER,
                              "cuGetProcAddress_v2(\"%s\", ABI %d) in %s failed: %s (%d)",
                              entries[i].name, entries[i].version, path,
                              p2pt__cuda_error_name(r), (int)r);
        }
        if ((r != CUDA_SUCCESS || fn == NULL) && entries[i].required) {
            dlclose(lib);
            return p2pt__fail(P2PT_NO_DRIVER,
                              "the CUDA driver %s has no %s (ABI %d): %s, lookup "
                              "result %d; p2pt needs a CUDA 12.0 or newer driver",
                              path, entries[i].name, entries[i].version,
                              p2pt__cuda_error_name(r), (int)found);
        }
        if (r == CUDA_SUCCESS)
            memcpy((char *)&table + entries[i].offset, &fn, sizeof(fn));
    }
    CUresult r = table.cuInit(0);
    if (r != CUDA_SUCCESS) {
        /* Keep the handle: the error-name functions in `table` are still
         * usable for the message. */
        p2pt__cu.cuGetErrorName = table.cuGetErrorName;
        p2pt__cu.cuGetErrorString = table.cuGetErrorString;
        return p2pt__fail(P2PT_NO_DRIVER, "cuInit(0) in %s failed: %s (%d)%s", path,
                          p2pt__cuda_error_name(r), (int)r,
                          r == CUDA_ERROR_NO_DEVICE ? ": no CUDA device is visible"
                                                    : "");
    }
    /* The library stays open for the life of the process: entry points are
     * shared by every handle, and unloading a driver is never safe. */
    p2pt__cu = table;
    proc_address = gpa;
    return P2PT_SUCCESS;
}

void *p2pt__cuda_proc(const char *name, int version)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult found;
    if (proc_address == NULL ||
        proc_address(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS)
        return NULL;
    return fn;
}

p2pt_status p2pt__cuda_fail(CUresult r, const char *call, const char *file, int line)
{
    const char *desc = NULL;
    if (p2pt__cu.cuGetErrorString == NULL ||
        p2pt__cu.cuGetErrorString(r, &desc) != CUDA_SUCCESS || desc == NULL)
        desc = "no description";
    const char *base = strrchr(file, '/');
    /* Errors a faulting kernel leaves in its context (any kernel of the
     * process, not only p2pt's): every later call there fails too. */
    bool sticky = r == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_LAUNCH_FAILED ||
                  r == CUDA_ERROR_ILLEGAL_INSTRUCTION || r == CUDA_ERROR_MISALIGNED_ADDRESS ||
                  r == CUDA_ERROR_HARDWARE_STACK_ERROR || r == CUDA_ERROR_INVALID_ADDRESS_SPACE ||
                  r == CUDA_ERROR_INVALID_PC || r == CUDA_ERROR_ASSERT ||
                  r == CUDA_ERROR_ECC_UNCORRECTABLE;
    return p2pt__fail(P2PT_CUDA_ERROR, "%s failed: %s (%d: %s) at %s:%d%s", call,
                      p2pt__cuda_error_name(r), (int)r, desc, base ? base + 1 : file, line,
                      sticky ? "; the CUDA context is unusable from now on (a kernel faulted "
                               "in it; the error is sticky: every later call in this "
                               "context fails, the process must create a new one or restart)"
                             : "");
}

p2pt_status p2pt__cuda_load(const char *path)
{
    if (path == NULL || path[0] == '\0')
        path = "libcuda.so.1";
    return p2pt__once(&load_once, load_locked, path);
}
