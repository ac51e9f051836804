/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fault schedule of fault_plan.h over the real driver, for GPU machines
 * (tests/fault/run-gpu.sh): a library that P2P_CUDA_LIBRARY names in place of
 * libcuda.so.1. It opens the real driver (P2PT_FAULT_REAL_CUDA, default
 * libcuda.so.1) and hands out, through cuGetProcAddress_v2, a wrapper for
 * each entry p2pt's table holds (src/cuda/cuda_loader.c) that counts the call and
 * fails it on schedule or forwards it; any other entry is the real one,
 * untouched. Failed calls never reach the driver, so the GPU sees exactly
 * the failure paths p2pt takes: a module load refused under capture, a
 * launch refused in the middle of a batch, a peer mapping that fails.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdint.h>

#define FAULT_LIBRARY "cuda-shim"
#include "fault_plan.h"

#define EXPORT __attribute__((visibility("default")))

static PFN_cuGetProcAddress_v12000 real_gpa;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void open_real(void)
{
    const char *path = getenv("P2PT_FAULT_REAL_CUDA");
    void *lib = dlopen(path != NULL && path[0] != '\0' ? path : "libcuda.so.1",
                       RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL)
        real_gpa = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
}

EXPORT void p2pt_fault_pause(int on);
EXPORT void p2pt_fault_pause(int on) { fault_paused = on; }

__attribute__((destructor)) static void fault_cuda_exit(void) { fault_census(); }

/* X(name as counted, name in the driver, ABI version, parameters, arguments) */
#define WRAPPED(X)                                                                              \
    X(cuInit, cuInit, 2000, (unsigned f), (f))                                                  \
    X(cuDriverGetVersion, cuDriverGetVersion, 2020, (int *v), (v))                              \
    X(cuGetErrorName, cuGetErrorName, 6000, (CUresult r, const char **s), (r, s))               \
    X(cuGetErrorString, cuGetErrorString, 6000, (CUresult r, const char **s), (r, s))           \
    X(cuDeviceGet, cuDeviceGet, 2000, (CUdevice * d, int o), (d, o))                            \
    X(cuDeviceGetCount, cuDeviceGetCount, 2000, (int *n), (n))                                  \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000,                                         \
      (int *v, CUdevice_attribute a, CUdevice d), (v, a, d))                                    \
    X(cuDeviceGetName, cuDeviceGetName, 2000, (char *s, int n, CUdevice d), (s, n, d))          \
    X(cuDeviceCanAccessPeer, cuDeviceCanAccessPeer, 4000, (int *c, CUdevice a, CUdevice b),     \
      (c, a, b))                                                                                \
    X(cuDeviceGetP2PAttribute, cuDeviceGetP2PAttribute, 8000,                                   \
      (int *v, CUdevice_P2PAttribute a, CUdevice s, CUdevice d), (v, a, s, d))                  \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, (CUcontext * c, CUdevice d),    \
      (c, d))                                                                                   \
    X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, (CUcontext * c), (c))                             \
    X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, (CUcontext c), (c))                               \
    X(cuCtxPushCurrent, cuCtxPushCurrent, 4000, (CUcontext c), (c))                             \
    X(cuCtxPopCurrent, cuCtxPopCurrent, 4000, (CUcontext * c), (c))                             \
    X(cuCtxGetDevice, cuCtxGetDevice, 2000, (CUdevice * d), (d))                                \
    X(cuCtxGetId, cuCtxGetId, 12000, (CUcontext c, unsigned long long *id), (c, id))            \
    X(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, 4000, (CUcontext c, unsigned f), (c, f))    \
    X(cuStreamGetCtx, cuStreamGetCtx, 9020, (CUstream s, CUcontext * c), (s, c))                \
    X(cuStreamIsCapturing, cuStreamIsCapturing, 10000,                                          \
      (CUstream s, CUstreamCaptureStatus * cs), (s, cs))                                        \
    X(cuMemcpyAsync, cuMemcpyAsync, 4000, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), \
      (d, s, n, st))                                                                            \
    X(cuPointerGetAttribute, cuPointerGetAttribute, 4000,                                       \
      (void *v, CUpointer_attribute a, CUdeviceptr p), (v, a, p))                               \
    X(cuPointerGetAttributes, cuPointerGetAttributes, 7000,                                     \
      (unsigned n, CUpointer_attribute * a, void **v, CUdeviceptr p), (n, a, v, p))             \
    X(cuModuleLoadData, cuModuleLoadData, 2000, (CUmodule * m, const void *image), (m, image))  \
    X(cuModuleUnload, cuModuleUnload, 2000, (CUmodule m), (m))                                  \
    X(cuModuleGetFunction, cuModuleGetFunction, 2000,                                           \
      (CUfunction * f, CUmodule m, const char *name), (f, m, name))                             \
    X(cuFuncSetAttribute, cuFuncSetAttribute, 9000, (CUfunction f, CUfunction_attribute a, int v), \
      (f, a, v))                                                                                \
    X(cuLaunchKernel, cuLaunchKernel, 4000,                                                     \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,           \
       unsigned bz, unsigned smem, CUstream s, void **p, void **e),                             \
      (f, gx, gy, gz, bx, by, bz, smem, s, p, e))                                               \
    X(cuLaunchKernelEx, cuLaunchKernelEx, 11060,                                                \
      (const CUlaunchConfig *c, CUfunction f, void **p, void **e), (c, f, p, e))                \
    X(cuMemcpyBatchAsync, cuMemcpyBatchAsync, 13000,                                            \
      (CUdeviceptr * d, CUdeviceptr * s, size_t * n, size_t count, CUmemcpyAttributes * a,      \
       size_t * ai, size_t na, CUstream st),                                                    \
      (d, s, n, count, a, ai, na, st))                                                          \
    X(cuMemcpyBatchAsync_v12080, cuMemcpyBatchAsync, 12080,                                     \
      (CUdeviceptr * d, CUdeviceptr * s, size_t * n, size_t count, CUmemcpyAttributes * a,      \
       size_t * ai, size_t na, size_t * fail, CUstream st),                                     \
      (d, s, n, count, a, ai, na, fail, st))                                                    \
    X(cuMemAllocHost, cuMemAllocHost, 3020, (void **p, size_t n), (p, n))                       \
    X(cuMemFreeHost, cuMemFreeHost, 2000, (void *p), (p))                                       \
    X(cuMemAlloc, cuMemAlloc, 3020, (CUdeviceptr * p, size_t n), (p, n))                        \
    X(cuMemFree, cuMemFree, 3020, (CUdeviceptr p), (p))                                         \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync, 3020,                                               \
      (CUdeviceptr d, const void *s, size_t n, CUstream st), (d, s, n, st))                     \
    X(cuEventCreate, cuEventCreate, 2000, (CUevent * e, unsigned f), (e, f))                    \
    X(cuEventRecord, cuEventRecord, 2000, (CUevent e, CUstream s), (e, s))                      \
    X(cuEventQuery, cuEventQuery, 2000, (CUevent e), (e))                                       \
    X(cuEventSynchronize, cuEventSynchronize, 2000, (CUevent e), (e))                          \
    X(cuDeviceGetUuid, cuDeviceGetUuid, 11040, (CUuuid * u, CUdevice d), (u, d))                \
    X(cuCtxSynchronize, cuCtxSynchronize, 2000, (void), ())                                     \
    X(cuEventDestroy, cuEventDestroy, 4000, (CUevent e), (e))                                   \
    X(cuMemGetAddressRange, cuMemGetAddressRange, 3020,                                         \
      (CUdeviceptr * b, size_t * n, CUdeviceptr p), (b, n, p))                                  \
    X(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, (CUipcMemHandle * h, CUdeviceptr p), (h, p))  \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 11000,                                            \
      (CUdeviceptr * p, CUipcMemHandle h, unsigned f), (p, h, f))                               \
    X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, (CUdeviceptr p), (p))                     \
    X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000,                          \
      (CUmemGenericAllocationHandle * h, void *a), (h, a))                                      \
    X(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle, 10020,    \
      (CUmemAllocationProp * p, CUmemGenericAllocationHandle h), (p, h))                        \
    X(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020,                        \
      (void *o, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t,                    \
       unsigned long long f),                                                                   \
      (o, h, t, f))                                                                             \
    X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020,                    \
      (CUmemGenericAllocationHandle * h, void *o, CUmemAllocationHandleType t), (h, o, t))      \
    X(cuMemRelease, cuMemRelease, 10020, (CUmemGenericAllocationHandle h), (h))                 \
    X(cuMemAddressReserve, cuMemAddressReserve, 10020,                                          \
      (CUdeviceptr * p, size_t n, size_t a, CUdeviceptr at, unsigned long long f),              \
      (p, n, a, at, f))                                                                         \
    X(cuMemAddressFree, cuMemAddressFree, 10020, (CUdeviceptr p, size_t n), (p, n))             \
    X(cuMemMap, cuMemMap, 10020,                                                                \
      (CUdeviceptr p, size_t n, size_t o, CUmemGenericAllocationHandle h, unsigned long long f), \
      (p, n, o, h, f))                                                                          \
    X(cuMemUnmap, cuMemUnmap, 10020, (CUdeviceptr p, size_t n), (p, n))                         \
    X(cuMemSetAccess, cuMemSetAccess, 10020,                                                    \
      (CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t c), (p, n, d, c))              \
    X(cuMemPoolExportToShareableHandle, cuMemPoolExportToShareableHandle, 11020,                \
      (void *o, CUmemoryPool p, CUmemAllocationHandleType t, unsigned long long f),             \
      (o, p, t, f))                                                                             \
    X(cuMemPoolExportPointer, cuMemPoolExportPointer, 11020,                                    \
      (CUmemPoolPtrExportData * d, CUdeviceptr p), (d, p))                                      \
    X(cuMemPoolImportFromShareableHandle, cuMemPoolImportFromShareableHandle, 11020,            \
      (CUmemoryPool * p, void *o, CUmemAllocationHandleType t, unsigned long long f),           \
      (p, o, t, f))                                                                             \
    X(cuMemPoolImportPointer, cuMemPoolImportPointer, 11020,                                    \
      (CUdeviceptr * p, CUmemoryPool pool, CUmemPoolPtrExportData * d), (p, pool, d))           \
    X(cuMemPoolSetAccess, cuMemPoolSetAccess, 11020,                                            \
      (CUmemoryPool p, const CUmemAccessDesc *d, size_t n), (p, d, n))                          \
    X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, (CUmemoryPool p), (p))

#define DEFINE_WRAPPER(label, name, ver, params, args)                         \
    static PFN_##name##_v##ver real_##label;                                   \
    static CUresult CUDAAPI wrap_##label params                                \
    {                                                                          \
        int code = fault_hit(#label);                                          \
        if (code != 0)                                                         \
            return (CUresult)code;                                             \
        return real_##label args;                                              \
    }
WRAPPED(DEFINE_WRAPPER)
#undef DEFINE_WRAPPER

EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                            cuuint64_t flags, CUdriverProcAddressQueryResult *found)
{
    pthread_once(&real_once, open_real);
    if (real_gpa == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    int code = fault_hit("cuGetProcAddress_v2");
    if (code != 0)
        return (CUresult)code;
    CUresult r = real_gpa(symbol, pfn, version, flags, found);
    if (r != CUDA_SUCCESS || pfn == NULL || *pfn == NULL)
        return r;
    /* The ABI versions p2pt asks for; cuMemcpyBatchAsync is asked for at two. */
#define SWAP(label, name, ver, params, args)                                   \
    if (strcmp(symbol, #name) == 0 && version == ver) {                        \
        real_##label = (PFN_##name##_v##ver)*pfn;                              \
        *pfn = (void *)wrap_##label;                                           \
        return r;                                                              \
    }
    WRAPPED(SWAP)
#undef SWAP
    return r;
}

EXPORT CUresult CUDAAPI cuInit(unsigned int flags)
{
    void *fn = NULL;
    CUresult r = cuGetProcAddress_v2("cuInit", &fn, 2000, CU_GET_PROC_ADDRESS_DEFAULT, NULL);
    if (r != CUDA_SUCCESS)
        return r;
    return ((PFN_cuInit_v2000)fn)(flags);
}
