/*
 * Internal interfaces of p2pt: one section per src/ file. Tests and the
 * benchmark link libp2pt.a and may use these; frameworks never see them.
 * Names: `p2pt__` for internal functions and data, `static` for file-local.
 */
#ifndef P2PT_INTERNAL_H
#define P2PT_INTERNAL_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "p2pt.h"

#define P2PT_INTERNAL __attribute__((visibility("hidden")))
#define P2PT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define P2PT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------ status.c */

/* Record `fmt` as the calling thread's last error and return `st`. */
P2PT_INTERNAL p2pt_status p2pt__fail(p2pt_status st, const char *fmt, ...)
    P2PT_PRINTF(2, 3);
/* Record a failed driver call: "<call> failed: CUDA_ERROR_X (text) at file:line". */
P2PT_INTERNAL p2pt_status p2pt__cuda_fail(CUresult r, const char *call,
                                          const char *file, int line);
P2PT_INTERNAL p2pt_status p2pt__nvrtc_fail(nvrtcResult r, const char *call,
                                           const char *file, int line);
P2PT_INTERNAL void p2pt__clear_error(void);
P2PT_INTERNAL const char *p2pt__last_error_text(void);

/*
 * A step done once per process whose outcome every later caller gets again,
 * status and last-error text (the driver and NVRTC loads): the first caller
 * runs `fn(arg)` under the mutex, the others wait for it.
 */
struct p2pt_once {
    pthread_mutex_t lock;
    _Atomic int done; /* 1 once status and text are final */
    p2pt_status status;
    char text[2048];
};
#define P2PT_ONCE_INIT {PTHREAD_MUTEX_INITIALIZER, 0, P2PT_SUCCESS, ""}
P2PT_INTERNAL p2pt_status p2pt__once(struct p2pt_once *o, p2pt_status (*fn)(const char *),
                                     const char *arg);

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

#define P2PT_NVRTC(call)                                                       \
    do {                                                                       \
        nvrtcResult nv_r_ = (call);                                            \
        if (nv_r_ != NVRTC_SUCCESS) {                                          \
            st = p2pt__nvrtc_fail(nv_r_, #call, __FILE__, __LINE__);           \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* Propagate a p2pt_status (the callee has already recorded the text). */
#define P2PT_TRY(expr)                                                         \
    do {                                                                       \
        st = (expr);                                                           \
        if (st != P2PT_SUCCESS)                                                \
            goto out;                                                          \
    } while (0)

/* --------------------------------------------------------------------- log.c */

struct p2pt_logger {
    p2pt_logger_t fn; /* NULL: built-in stderr logger */
    int level;        /* threshold for the built-in logger */
};

P2PT_INTERNAL void p2pt__log(const struct p2pt_logger *lg, p2pt_log_level lvl,
                             const char *file, int line, const char *fmt, ...)
    P2PT_PRINTF(5, 6);
#define P2PT_LOG(lg, lvl, ...) p2pt__log((lg), (lvl), __FILE__, __LINE__, __VA_ARGS__)
#define P2PT_WARN(lg, ...) P2PT_LOG(lg, P2PT_LOG_WARN, __VA_ARGS__)
#define P2PT_INFO(lg, ...) P2PT_LOG(lg, P2PT_LOG_INFO, __VA_ARGS__)

/* ------------------------------------------------------------------ config.c */

/* Limits that hold on every device; the device's own shared-memory limit is
 * checked again at prepare. */
#define P2PT_CHUNK_MIN 16u
#define P2PT_CHUNK_MAX (227u * 1024u) /* Hopper's per-block opt-in maximum */
#define P2PT_STAGES_MIN 1
#define P2PT_STAGES_MAX 16
#define P2PT_MAX_CTAS_MAX 4096
#define P2PT_PATH_MAX 1024

struct p2pt_config {
    char transport[16];           /* lower-case name of a registered transport */
    int log_level;                /* built-in logger threshold */
    size_t chunk_bytes;           /* P2P_TRANSPORT_CHUNK_BYTES */
    int stages;                   /* P2P_TRANSPORT_STAGES */
    int max_ctas;                 /* P2P_TRANSPORT_MAX_CTAS, 0 = auto */
    int validate;                 /* P2P_TRANSPORT_VALIDATE, 0 or 1 */
    int l2_evict_first;           /* P2P_TRANSPORT_L2_HINT: 1 = evict_first */
    char cuda_library[P2PT_PATH_MAX];  /* P2P_CUDA_LIBRARY */
    char nvrtc_library[P2PT_PATH_MAX]; /* P2P_NVRTC_LIBRARY, "" = search */
    char cache_dir[P2PT_PATH_MAX];     /* P2P_TRANSPORT_CACHE_DIR, "" = no cache */
    int pdl;                      /* P2P_TRANSPORT_PDL, 0 or 1 */
};

/* Defaults, then the environment, then `transport_override` (init args).
 * Fails with P2PT_INVALID_ARGUMENT naming the variable, value and what is
 * accepted. Touches no CUDA library. */
P2PT_INTERNAL p2pt_status p2pt__config_read(struct p2pt_config *cfg,
                                            const char *transport_override);
/* Decimal with an optional binary K/M/G suffix; false on junk or overflow. */
P2PT_INTERNAL bool p2pt__parse_size(const char *s, unsigned long long *out);
/* Shared memory one CTA needs for this configuration. */
P2PT_INTERNAL size_t p2pt__config_smem_bytes(const struct p2pt_config *cfg);

/* ------------------------------------------------------------- cuda_loader.c */

/*
 * The driver entry points p2pt uses, fetched once with cuGetProcAddress at the
 * ABI version named in the member's type. No libcuda at link time.
 */
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
    PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease;
    PFN_cuCtxCreate_v3020 cuCtxCreate;
    PFN_cuCtxDestroy_v4000 cuCtxDestroy;
    PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent;
    PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent;
    PFN_cuCtxPushCurrent_v4000 cuCtxPushCurrent;
    PFN_cuCtxPopCurrent_v4000 cuCtxPopCurrent;
    PFN_cuCtxGetDevice_v2000 cuCtxGetDevice;
    PFN_cuCtxGetId_v12000 cuCtxGetId;
    PFN_cuCtxSynchronize_v2000 cuCtxSynchronize;
    PFN_cuCtxEnablePeerAccess_v4000 cuCtxEnablePeerAccess;
    PFN_cuCtxDisablePeerAccess_v4000 cuCtxDisablePeerAccess;
    PFN_cuStreamCreate_v2000 cuStreamCreate;
    PFN_cuStreamDestroy_v4000 cuStreamDestroy;
    PFN_cuStreamSynchronize_v2000 cuStreamSynchronize;
    PFN_cuStreamWaitEvent_v3020 cuStreamWaitEvent;
    PFN_cuStreamGetCtx_v9020 cuStreamGetCtx;
    PFN_cuStreamIsCapturing_v10000 cuStreamIsCapturing;
    PFN_cuStreamBeginCapture_v10010 cuStreamBeginCapture;
    PFN_cuStreamEndCapture_v10000 cuStreamEndCapture;
    PFN_cuGraphInstantiateWithFlags_v11040 cuGraphInstantiateWithFlags;
    PFN_cuGraphLaunch_v10000 cuGraphLaunch;
    PFN_cuGraphExecDestroy_v10000 cuGraphExecDestroy;
    PFN_cuGraphDestroy_v10000 cuGraphDestroy;
    PFN_cuEventCreate_v2000 cuEventCreate;
    PFN_cuEventDestroy_v4000 cuEventDestroy;
    PFN_cuEventRecord_v2000 cuEventRecord;
    PFN_cuEventSynchronize_v2000 cuEventSynchronize;
    PFN_cuEventElapsedTime_v2000 cuEventElapsedTime;
    PFN_cuEventQuery_v2000 cuEventQuery;
    PFN_cuMemAlloc_v3020 cuMemAlloc;
    PFN_cuMemFree_v3020 cuMemFree;
    PFN_cuMemAllocHost_v3020 cuMemAllocHost;
    PFN_cuMemFreeHost_v2000 cuMemFreeHost;
    PFN_cuMemcpyHtoD_v3020 cuMemcpyHtoD;
    PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH;
    PFN_cuMemcpyAsync_v4000 cuMemcpyAsync;
    PFN_cuMemsetD8_v3020 cuMemsetD8;
    PFN_cuMemsetD8Async_v3020 cuMemsetD8Async;
    PFN_cuMemGetInfo_v3020 cuMemGetInfo;
    PFN_cuPointerGetAttribute_v4000 cuPointerGetAttribute;
    PFN_cuPointerGetAttributes_v7000 cuPointerGetAttributes;
    PFN_cuModuleLoadData_v2000 cuModuleLoadData;
    PFN_cuModuleUnload_v2000 cuModuleUnload;
    PFN_cuModuleGetFunction_v2000 cuModuleGetFunction;
    PFN_cuFuncSetAttribute_v9000 cuFuncSetAttribute;
    PFN_cuFuncGetAttribute_v2020 cuFuncGetAttribute;
    PFN_cuLaunchKernel_v4000 cuLaunchKernel;
    PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050 cuOccupancyMaxActiveBlocksPerMultiprocessor;
    /* Optional (NULL when the driver lacks them): programmatic dependent
     * launch for the TMA kernel (cuLaunchKernelEx; without it p2pt launches
     * plainly), and memory pools, virtual memory management and IPC
     * handles, used by tests and the benchmark. */
    PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx;
    PFN_cuStreamWaitValue32_v11070 cuStreamWaitValue32; /* the bench's gate */
    PFN_cuMemAllocFromPoolAsync_v11020 cuMemAllocFromPoolAsync;
    PFN_cuMemFreeAsync_v11020 cuMemFreeAsync;
    PFN_cuDeviceGetDefaultMemPool_v11020 cuDeviceGetDefaultMemPool;
    PFN_cuMemPoolSetAccess_v11020 cuMemPoolSetAccess;
    PFN_cuMemPoolCreate_v11020 cuMemPoolCreate;
    PFN_cuMemPoolDestroy_v11020 cuMemPoolDestroy;
    PFN_cuMemCreate_v10020 cuMemCreate;
    PFN_cuMemRelease_v10020 cuMemRelease;
    PFN_cuMemMap_v10020 cuMemMap;
    PFN_cuMemUnmap_v10020 cuMemUnmap;
    PFN_cuMemSetAccess_v10020 cuMemSetAccess;
    PFN_cuMemGetAccess_v10020 cuMemGetAccess;
    PFN_cuMemAddressReserve_v10020 cuMemAddressReserve;
    PFN_cuMemAddressFree_v10020 cuMemAddressFree;
    PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity;
    PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle;
    PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle;
};

/* The table, valid after p2pt__cuda_load succeeded. */
P2PT_INTERNAL extern struct p2pt_cuda p2pt__cu;

/*
 * Open the driver library at `path` (default "libcuda.so.1"), fetch every
 * entry point and call cuInit(0). Done once per process; later calls return
 * the first outcome again (and its text). P2PT_NO_DRIVER when the library is
 * missing, is the toolkit's stub, or cuInit fails.
 */
P2PT_INTERNAL p2pt_status p2pt__cuda_load(const char *path);
/* "CUDA_ERROR_X" for a CUresult, also before the driver loaded. */
P2PT_INTERNAL const char *p2pt__cuda_error_name(CUresult r);

/* ------------------------------------------------------------ nvrtc_loader.c */

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

/* ------------------------------------------------------------- chunk_plan.c */

/*
 * How one copy is cut up. Offsets are relative to the start of the copy.
 *   [0, head)                 plain loads and stores (dst not yet 16-aligned)
 *   [head, head + body)       16-byte aligned, cut into `chunks` chunks of
 *                             `chunk` bytes, the last one possibly shorter
 *   [head + body, bytes)      the tail, plain loads and stores (< 16 bytes)
 * When dst and src differ modulo 16 `coaligned` is false and the whole copy
 * is head (body = tail = 0): no TMA possible.
 */
struct p2pt_chunk_plan {
    size_t bytes;
    size_t head;
    size_t body;
    size_t tail;
    size_t chunk;
    uint64_t chunks;
    bool coaligned;
};

#define P2PT_ALIGN 16u

/* Pure arithmetic, no CUDA. P2PT_INVALID_ARGUMENT when chunk_bytes is zero
 * or not a multiple of 16. */
P2PT_INTERNAL p2pt_status p2pt__chunk_plan(uintptr_t dst, uintptr_t src,
                                           size_t bytes, size_t chunk_bytes,
                                           struct p2pt_chunk_plan *plan);
/* Offset (from the copy's start) and length of body chunk `i` < chunks. The
 * kernel computes exactly this. */
P2PT_INTERNAL void p2pt__chunk_at(const struct p2pt_chunk_plan *plan,
                                  uint64_t i, size_t *offset, size_t *len);

/* -------------------------------------------------------------------- jit.c */

/* The kernel source, generated at build time from kernels/tma_copy.cu. */
P2PT_INTERNAL extern const char p2pt__tma_copy_source[];
P2PT_INTERNAL extern const size_t p2pt__tma_copy_source_len;

#define P2PT_TMA_KERNEL_NAME "p2pt_tma_copy"
#define P2PT_TMA_THREADS 32
#define P2PT_TMA_FLAG_EVICT_FIRST 1u /* same value in kernels/tma_copy.cu */

/* A loaded kernel in one CUDA context. */
struct p2pt_module {
    CUcontext ctx;
    unsigned long long ctx_id; /* distinguishes a recycled CUcontext value */
    CUdevice device;
    int ordinal;
    int sm_count;
    int smem_per_block_optin;
    int smem_per_sm;
    CUmodule module;
    CUfunction fn;
};

/*
 * Compile `source` with NVRTC for sm_<arch> into a cubin (malloc'd, caller
 * frees). On a compile error: P2PT_COMPILE_ERROR with the first lines of the
 * log in the last error. Releases everything it created on every path. Also
 * the test hook for deliberately broken sources.
 */
P2PT_INTERNAL p2pt_status p2pt__jit_compile(const char *source, int arch,
                                            const char *nvrtc_path,
                                            void **cubin, size_t *cubin_size);
/* PTX for compute_<arch> (malloc'd, NUL-terminated), for build checks. */
P2PT_INTERNAL p2pt_status p2pt__jit_compile_ptx(const char *source, int arch,
                                                const char *nvrtc_path,
                                                char **ptx);
/*
 * The kernel loaded in context `ctx`: compiled once per process and
 * architecture, loaded once per context (a destroyed context whose handle
 * value comes back gets a fresh load: entries are keyed by cuCtxGetId).
 * When a load is needed and `capture_stream` is non-NULL and capturing, fails
 * with P2PT_INVALID_USAGE instead of loading (call prepare before capture).
 * Devices below compute capability 9.0 get P2PT_NOT_SUPPORTED.
 */
P2PT_INTERNAL p2pt_status p2pt__jit_module(CUcontext ctx, const struct p2pt_config *cfg,
                                           const struct p2pt_logger *log,
                                           const CUstream *capture_stream,
                                           const struct p2pt_module **out);
P2PT_INTERNAL uint64_t p2pt__jit_compilations(void);
P2PT_INTERNAL uint64_t p2pt__jit_module_loads(void);
P2PT_INTERNAL uint64_t p2pt__jit_cache_hits(void);

/* ------------------------------------------------------------ cubin_cache.c */

enum p2pt_cache_result {
    P2PT_CACHE_HIT,      /* *cubin holds a complete cubin (malloc'd) */
    P2PT_CACHE_MISS,     /* no file (or the cache is off) */
    P2PT_CACHE_UNUSABLE, /* a file or directory that must not be used; `why` says */
};

/* The cache file name for the kernel `source` compiled with `options` for
 * sm_<arch> by this p2pt version: "tma_copy-sm_90-<16 hex digits>.cubin". */
P2PT_INTERNAL void p2pt__cubin_cache_name(char *out, size_t len, const char *source,
                                          const char *options, int arch);
/* Read `dir`/`name` ("" dir = cache off). `why` gets the path on a hit and
 * the reason otherwise. Never fails a copy. */
P2PT_INTERNAL enum p2pt_cache_result p2pt__cubin_cache_read(const char *dir, const char *name,
                                                            void **cubin, size_t *size,
                                                            char *why, size_t why_len);
/* Write atomically (temporary file + rename), creating `dir` (mode 0700)
 * if needed. False, with the reason in `why`, when it could not. */
P2PT_INTERNAL bool p2pt__cubin_cache_write(const char *dir, const char *name,
                                           const void *cubin, size_t size, char *why,
                                           size_t why_len);
/* A complete little-endian ELF64 image (header tables inside `size`). */
P2PT_INTERNAL bool p2pt__cubin_complete(const void *buf, size_t size);

/* -------------------------------------------------------------- transport.c */

struct p2pt_handle;

/*
 * One copy request as it travels from p2pt_copy_async to a transport, with
 * what p2pt__copy_check learned on the way (validation on): the stream's
 * context and where both addresses live. A transport uses what is known and
 * asks the driver only for what is not, so no lookup is made twice per copy.
 */
struct p2pt_copy {
    void *dst;
    const void *src;
    size_t bytes;
    CUstream stream;
    CUcontext ctx;        /* the stream's context; NULL until looked up */
    bool located;         /* dst_dev and src_dev are known */
    int dst_dev, src_dev; /* device ordinals; -1 for memory on no device */
};

struct p2pt_transport_ops {
    const char *name;
    /* One-time work for `device` in the current/primary context. May JIT;
     * never called during stream capture. */
    p2pt_status (*prepare)(struct p2pt_handle *h, int device);
    /* Enqueue `c`; its arguments are already checked (non-zero, no overlap). */
    p2pt_status (*copy)(struct p2pt_handle *h, struct p2pt_copy *c);
};

P2PT_INTERNAL extern const struct p2pt_transport_ops p2pt__transport_ce;
P2PT_INTERNAL extern const struct p2pt_transport_ops p2pt__transport_tma;
/* NULL-terminated. */
P2PT_INTERNAL extern const struct p2pt_transport_ops *const p2pt__transports[];
/* Case-insensitive lookup; NULL when unknown. */
P2PT_INTERNAL const struct p2pt_transport_ops *p2pt__transport_find(const char *name);
/* "ce, tma" into buf, for messages. */
P2PT_INTERNAL const char *p2pt__transport_names(char *buf, size_t len);

/* ----------------------------------------------------------------- handle */

struct p2pt_stats {
    _Atomic uint64_t copies, bytes, tma_launches, ce_copies, ce_fallbacks,
        rejected;
};

#define P2PT_HANDLE_MAGIC 0x70327074u /* "p2pt" */
#define P2PT_MAX_DEVICES 64

struct p2pt_handle {
    uint32_t magic;
    struct p2pt_config cfg;
    struct p2pt_logger log;
    const struct p2pt_transport_ops *ops;
    int driver_version;
    struct p2pt_stats stats;
    /* one bit per (stream device, remote device) pair already warned */
    _Atomic uint64_t warned_pairs[P2PT_MAX_DEVICES];
    _Atomic int fallback_logged;
};

/* NULL: P2PT_INVALID_ARGUMENT; not a live handle (never initialized or
 * finalized): P2PT_INVALID_USAGE. `fn` names the caller in the message.
 * (api.c; every entry point that takes a handle uses it.) */
P2PT_INTERNAL p2pt_status p2pt__check_handle(const p2pt_handle *h, const char *fn);

/* ------------------------------------------------------------------ copy.c */

/*
 * Check arguments (NULL, wrap-around, overlap) and, with validation on, that
 * the stream's device can reach both addresses. Logs a WARN once per device
 * pair when a cross-device copy is not peer-to-peer. Records and counts a
 * rejection.
 */
P2PT_INTERNAL p2pt_status p2pt__copy_check(struct p2pt_handle *h, struct p2pt_copy *c);
/* Fill c->dst_dev and c->src_dev unless the check already did; an address
 * the driver cannot place gets -1. */
P2PT_INTERNAL void p2pt__copy_locate(struct p2pt_copy *c);
/* P2PT_INVALID_ARGUMENT naming `what` and `device` unless the driver sees
 * that device. */
P2PT_INTERNAL p2pt_status p2pt__check_device(int device, const char *what);
/* The current context, or the primary context of `device` made current when
 * the thread has none for it; *pushed tells whether to pop. */
P2PT_INTERNAL p2pt_status p2pt__ctx_enter(int device, CUcontext *ctx, bool *pushed);
P2PT_INTERNAL void p2pt__ctx_leave(bool pushed);

#endif /* P2PT_INTERNAL_H */
