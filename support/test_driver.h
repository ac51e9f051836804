/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Driver entry points that only the tests and the benchmark call (buffers,
 * streams, events, graphs, pools, virtual memory, IPC), fetched from the
 * driver the library loaded. The library's own table (src/cuda/driver.h) holds
 * only what it calls, so it never refuses a driver for lacking one of these.
 */
#ifndef P2PT_TEST_DRIVER_H
#define P2PT_TEST_DRIVER_H

#include "driver.h"

/* X(name, ABI version, required) */
#define P2PT_TEST_DRIVER_ENTRIES(X)                                            \
    X(cuDeviceGet, 2000, 1)                                                    \
    X(cuDeviceGetCount, 2000, 1)                                               \
    X(cuDeviceGetAttribute, 2000, 1)                                           \
    X(cuDeviceGetName, 2000, 1)                                                \
    X(cuDeviceCanAccessPeer, 4000, 1)                                          \
    X(cuDeviceGetP2PAttribute, 8000, 1)                                        \
    X(cuDevicePrimaryCtxRetain, 7000, 1)                                       \
    X(cuDevicePrimaryCtxRelease, 11000, 1)                                     \
    X(cuCtxCreate, 3020, 0)                                                    \
    X(cuCtxDestroy, 4000, 0)                                                   \
    X(cuCtxGetCurrent, 4000, 1)                                                \
    X(cuCtxSetCurrent, 4000, 1)                                                \
    X(cuCtxSynchronize, 2000, 1)                                               \
    X(cuCtxEnablePeerAccess, 4000, 1)                                          \
    X(cuStreamCreate, 2000, 1)                                                 \
    X(cuStreamDestroy, 4000, 1)                                                \
    X(cuStreamSynchronize, 2000, 1)                                            \
    X(cuStreamWaitEvent, 3020, 1)                                              \
    X(cuStreamWaitValue32, 11070, 0)                                           \
    X(cuStreamBeginCapture, 10010, 0)                                          \
    X(cuStreamEndCapture, 10000, 0)                                            \
    X(cuGraphInstantiateWithFlags, 11040, 0)                                   \
    X(cuGraphLaunch, 10000, 0)                                                 \
    X(cuGraphExecDestroy, 10000, 0)                                            \
    X(cuGraphDestroy, 10000, 0)                                                \
    X(cuEventCreate, 2000, 1)                                                  \
    X(cuEventDestroy, 4000, 1)                                                 \
    X(cuEventRecord, 2000, 1)                                                  \
    X(cuEventSynchronize, 2000, 1)                                             \
    X(cuEventQuery, 2000, 1)                                                   \
    X(cuStreamQuery, 2000, 0)                                                  \
    X(cuEventElapsedTime, 2000, 1)                                             \
    X(cuMemAlloc, 3020, 1)                                                     \
    X(cuMemFree, 3020, 1)                                                      \
    X(cuMemAllocHost, 3020, 1)                                                 \
    X(cuMemFreeHost, 2000, 1)                                                  \
    X(cuMemHostAlloc, 2020, 0)                                                 \
    X(cuMemHostRegister, 6050, 0)                                              \
    X(cuMemHostUnregister, 4000, 0)                                            \
    X(cuMemcpyHtoD, 3020, 1)                                                   \
    X(cuMemcpyDtoH, 3020, 1)                                                   \
    X(cuMemcpyAsync, 4000, 1)                                                  \
    X(cuMemcpyBatchAsync, 13000, 0)                                            \
    X(cuMemsetD8, 3020, 1)                                                     \
    X(cuMemcpyHtoDAsync, 3020, 1)                                              \
    X(cuModuleLoadData, 2000, 1)                                               \
    X(cuModuleUnload, 2000, 1)                                                 \
    X(cuModuleGetFunction, 2000, 1)                                            \
    X(cuLaunchKernel, 4000, 1)                                                 \
    X(cuMemGetInfo, 3020, 1)                                                   \
    X(cuMemAllocFromPoolAsync, 11020, 0)                                       \
    X(cuMemFreeAsync, 11020, 0)                                                \
    X(cuDeviceGetDefaultMemPool, 11020, 0)                                     \
    X(cuMemPoolSetAccess, 11020, 0)                                            \
    X(cuStreamWriteValue32, 11070, 0)                                          \
    X(cuMemCreate, 10020, 0)                                                   \
    X(cuMemRelease, 10020, 0)                                                  \
    X(cuMemMap, 10020, 0)                                                      \
    X(cuMemUnmap, 10020, 0)                                                    \
    X(cuMemSetAccess, 10020, 0)                                                \
    X(cuMemAddressReserve, 10020, 0)                                           \
    X(cuMemAddressFree, 10020, 0)                                              \
    X(cuMemGetAllocationGranularity, 10020, 0)                                 \
    X(cuMemExportToShareableHandle, 10020, 0)                                  \
    X(cuMemImportFromShareableHandle, 10020, 0)                                \
    X(cuIpcGetMemHandle, 4010, 0)                                              \
    X(cuIpcOpenMemHandle, 11000, 0)                                            \
    X(cuIpcCloseMemHandle, 4010, 0)                                            \
    X(cuCtxDisablePeerAccess, 4000, 0)                                         \
    X(cuMemPoolCreate, 11020, 0)                                               \
    X(cuMemPoolDestroy, 11020, 0)                                              \
    X(cuMemPoolExportToShareableHandle, 11020, 0)                              \
    X(cuMemPoolImportFromShareableHandle, 11020, 0)                            \
    X(cuMemPoolExportPointer, 11020, 0)                                        \
    X(cuMemPoolImportPointer, 11020, 0)                                        \
    X(cuMemsetD8Async, 3020, 0)

struct p2pt_test_cuda {
#define P2PT_TEST_DRIVER_FIELD_(name, ver, req) PFN_##name##_v##ver name;
    P2PT_TEST_DRIVER_ENTRIES(P2PT_TEST_DRIVER_FIELD_)
#undef P2PT_TEST_DRIVER_FIELD_
};

/* The tests' and benchmark's table, valid after p2pt_test_driver_load. */
extern struct p2pt_test_cuda tcu;

/* Load the driver (`path`, NULL for libcuda.so.1) through the library's
 * loader and fill `tcu`. On failure the last error says why (status 7 from
 * the loader, or a required entry missing). */
p2pt_status p2pt_test_driver_load(const char *path);

#endif /* P2PT_TEST_DRIVER_H */
