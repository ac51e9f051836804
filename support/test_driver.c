/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fills the tests' and benchmark's driver table (support/test_driver.h)
 * from the driver the library loaded.
 */
#include "test_driver.h"

struct p2pt_test_cuda tcu;

p2pt_status p2pt_test_driver_load(const char *path)
{
    p2pt_status st = p2pt__cuda_load(path != NULL ? path : "libcuda.so.1");
    if (st != P2PT_SUCCESS)
        return st;
    void *fn;
#define P2PT_TEST_DRIVER_FETCH_(name, ver, req)                                \
    fn = p2pt__cuda_proc(#name, ver);                                          \
    if (fn == NULL && (req))                                                   \
        return p2pt__fail(P2PT_NO_DRIVER, "the CUDA driver has no %s (ABI %d)", #name, ver); \
    tcu.name = (PFN_##name##_v##ver)fn;
    P2PT_TEST_DRIVER_ENTRIES(P2PT_TEST_DRIVER_FETCH_)
#undef P2PT_TEST_DRIVER_FETCH_
    return P2PT_SUCCESS;
}
