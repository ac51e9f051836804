/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NVRTC, reached at run time like the driver (nvrtc_loader.c): a process
 * that never compiles a kernel never loads it.
 */
#ifndef P2PT_NVRTC_LOADER_H
#define P2PT_NVRTC_LOADER_H

#include <nvrtc.h>

#include "common.h"

struct p2pt_nvrtc {
    nvrtcResult (*nvrtcVersion)(int *major, int *minor);
    const char *(*nvrtcGetErrorString)(nvrtcResult r);
    nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *prog, const char *src,
                                      const char *name, int num_headers,
                                      const char *const *headers,
                                      const char *const *include_names);
    nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *prog);
    nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram prog, int num_options,
                                       const char *const *options);
    nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram prog, char *log);
    nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram prog, char *cubin);
    nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram prog, size_t *size);
    nvrtcResult (*nvrtcGetPTX)(nvrtcProgram prog, char *ptx);
};

P2PT_INTERNAL extern struct p2pt_nvrtc p2pt__nv;

/*
 * Open NVRTC once per process: `path` when non-empty, else libnvrtc.so.13,
 * libnvrtc.so.12, then the same names under $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64. P2PT_COMPILE_ERROR naming every library tried.
 */
P2PT_INTERNAL p2pt_status p2pt__nvrtc_load(const char *path);
P2PT_INTERNAL p2pt_status p2pt__nvrtc_fail(nvrtcResult r, const char *call, const char *file,
                                           int line);

#define P2PT_NVRTC(call)                                                       \
    do {                                                                       \
        nvrtcResult nv_r_ = (call);                                            \
        if (nv_r_ != NVRTC_SUCCESS) {                                          \
            st = p2pt__nvrtc_fail(nv_r_, #call, __FILE__, __LINE__);           \
            goto out;                                                          \
        }                                                                      \
    } while (0)

#endif /* P2PT_NVRTC_LOADER_H */
