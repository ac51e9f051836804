/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Kernels described to the JIT, and their run-time compilation and
 * per-context modules (jit.c).
 *
 * A kernel is a descriptor that the transport using it defines beside its
 * own code: its source file (embedded at build time), its entry points, the
 * lowest compute capability it runs on, and the `-D` defines it is built
 * with. Every kernel also sees kernels/p2pt_kernel_abi.h,
 * the constants and layouts the host code uses too, kernels/tma_ptx.cuh,
 * the PTX helpers, and kernels/batch_tiles.cuh, the batch kernel's tiles
 * (p2pt__jit_headers). NVRTC runs once per
 * process, kernel and architecture; cubins are cached on disk per (kernel,
 * architecture, options); modules are loaded once per context.
 */
#ifndef P2PT_JIT_H
#define P2PT_JIT_H

#include "config.h"
#include "driver.h"
#include "kernel_sources.h" /* generated: every file of kernels/, embedded */

#define P2PT_KERNEL_MAX_ENTRIES 8

struct p2pt_kernel {
    const char *name;                 /* "tma_copy": cache files, messages */
    const char *file;                 /* "kernels/tma_copy.cu", for messages */
    const char *source;               /* embedded text of `file` */
    const char *entries[P2PT_KERNEL_MAX_ENTRIES]; /* extern "C" names, NULL-ended */
    int min_cc;                       /* major * 10 + minor */
    const char *defines[4];           /* "-DNAME=VALUE" options, NULL-ended */
    bool dynamic_smem;                /* its launches ask for dynamic shared memory */
};

/* A kernel loaded in one CUDA context, with the device facts its launches
 * are sized from. */
struct p2pt_module {
    CUcontext ctx;
    unsigned long long ctx_id; /* distinguishes a recycled CUcontext value */
    const struct p2pt_kernel *kernel;
    CUdevice device;
    int ordinal;
    int sm_count;
    int smem_per_block_optin; /* dynamic shared memory one CTA may ask for */
    int smem_per_sm;
    CUmodule module;
    CUfunction fn[P2PT_KERNEL_MAX_ENTRIES];
};

/*
 * Compile `source` (with the shared header and the standard options plus
 * `defines`, NULL-ended or NULL) with NVRTC for sm_<arch> into a cubin
 * (malloc'd, caller frees). On a compile error: P2PT_COMPILE_ERROR with the
 * first lines of the log. Releases everything it created on every path.
 * Also the test hook for deliberately broken sources.
 */
P2PT_INTERNAL p2pt_status p2pt__jit_compile(const char *source, const char *const *defines,
                                            int arch, const char *nvrtc_path, void **cubin,
                                            size_t *cubin_size);
/* The headers handed to NVRTC with every kernel, by name and text, as
 * NVRTC takes them: returns how many. */
P2PT_INTERNAL int p2pt__jit_headers(const char *const **names, const char *const **texts);
/* PTX for compute_<arch> (malloc'd, NUL-terminated), for build checks. */
P2PT_INTERNAL p2pt_status p2pt__jit_compile_ptx(const char *source,
                                                const char *const *defines, int arch,
                                                const char *nvrtc_path, char **ptx);
/*
 * Kernel `k` loaded in context `ctx`: compiled once per process and
 * architecture, loaded once per context (a destroyed context whose handle
 * value comes back gets a fresh load: entries are keyed by cuCtxGetId).
 * When a load is needed and `capture_stream` is non-NULL and capturing, fails
 * with P2PT_INVALID_USAGE instead of loading (call prepare before capture).
 * Devices below the kernel's compute capability get P2PT_NOT_SUPPORTED.
 */
P2PT_INTERNAL p2pt_status p2pt__jit_module(CUcontext ctx, const struct p2pt_kernel *k,
                                           const struct p2pt_config *cfg,
                                           const struct p2pt_logger *log,
                                           const CUstream *capture_stream,
                                           const struct p2pt_module **out);
P2PT_INTERNAL uint64_t p2pt__jit_compilations(void);
P2PT_INTERNAL uint64_t p2pt__jit_module_loads(void);
P2PT_INTERNAL uint64_t p2pt__jit_cache_hits(void);

#endif /* P2PT_JIT_H */
