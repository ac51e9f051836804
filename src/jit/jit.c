/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Run-time compilation of the kernels the transports describe, and their
 * per-context modules.
 *
 * Two caches, one mutex:
 *  - cubins, one per kernel and GPU architecture. NVRTC runs once per
 *    process, kernel and architecture: thirty-two threads making their first
 *    TMA copy together produce one compilation (the counter proves it in
 *    tests). Each slot has its own pthread_once_t; the kernel and
 *    architecture reach the once routine through a thread-local. The NVRTC
 *    library itself is opened once by nvrtc_loader.c.
 *  - modules, one per CUDA context, keyed by the context handle *and* its
 *    unique id (cuCtxGetId): a context destroyed and replaced by a new one at
 *    the same address gets the module loaded again, never a stale handle.
 * Before compiling, the on-disk cache (src/cubin_cache.c) is asked for a
 * cubin an earlier process compiled; after compiling, the cubin is saved
 * there. A cached cubin the driver refuses is compiled again and replaced.
 * Entries are never freed while the process lives, so a thread-local
 * pointer to the last one used is a lock-free fast path for copies.
 * The one compile (or cache read) per (kernel, architecture) runs under
 * that slot's pthread_once, inside the mutex: concurrent first copies wait
 * for the one compile instead of racing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubin_cache.h"
#include "jit.h"
#include "nvrtc_loader.h"

#define LOG_EXCERPT_LINES 12
#define MAX_SLOTS 32 /* (kernel, GPU architecture) pairs */
#define LAST_MODULES 4 /* per thread: the last module used of this many kernels */
#define STATIC_SMEM_RESERVE 1024 /* the kernel's mbarriers, rounded up */

/* compile()'s options besides the architecture. They shape the cubin, so
 * they are also part of its cache key (JIT_OPTIONS_ID, built from the same
 * literals). */
#define JIT_OPT_STD "--std=c++17"
#define JIT_OPT_MINIMAL "-minimal"
#define JIT_OPTIONS_ID JIT_OPT_STD " " JIT_OPT_MINIMAL

struct cubin_slot {
    const struct p2pt_kernel *kernel;
    int arch;
    p2pt_status status; /* a failed compile is remembered, not retried */
    bool retry; /* ...unless it failed for a passing reason (NVRTC out of
                   memory), not the source: then the next use compiles again */
    char *error;
    void *cubin;
    size_t size;
    bool from_disk; /* read from the cubin cache, not compiled here */
    bool hit_counted; /* cache_hits counts a slot once, when the driver took it */
    char cache_name[96];
    pthread_once_t once; /* the cache read or compile, once per slot */
};

struct module_node {
    struct p2pt_module m;
    struct module_node *next;
};

static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cubin_slot cubins[MAX_SLOTS];
static size_t n_cubins;
static struct module_node *modules;
static _Atomic uint64_t compilations;
static _Atomic uint64_t module_loads;
static _Atomic uint64_t cache_hits;
static _Thread_local const struct p2pt_module *last_module[LAST_MODULES];

/* Log lines made under jit_lock, sent after it is released: p2pt never calls
 * the framework's logger while holding a lock (include/p2pt.h). */
struct jit_notes {
    int n;
    struct {
        p2pt_log_level level;
        char text[P2PT_PATH_MAX + 320];
    } line[4];
};

static void note(struct jit_notes *jn, p2pt_log_level level, const char *fmt, ...)
    P2PT_PRINTF(3, 4);
static void note(struct jit_notes *jn, p2pt_log_level level, const char *fmt, ...)
{
    if (jn->n == (int)P2PT_ARRAY_LEN(jn->line))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(jn->line[jn->n].text, sizeof(jn->line[jn->n].text), fmt, ap);
    va_end(ap);
    jn->line[jn->n++].level = level;
}

uint64_t p2pt__jit_compilations(void) { return atomic_load(&compilations); }
uint64_t p2pt__jit_module_loads(void) { return atomic_load(&module_loads); }
uint64_t p2pt__jit_cache_hits(void) { return atomic_load(&cache_hits); }

/* The first lines of an NVRTC log, for the last-error text. */
static void log_excerpt(const char *log, char *out, size_t len)
{
    size_t lines = 0, i = 0;
    while (log[i] != '\0' && lines < LOG_EXCERPT_LINES && i + 1 < len) {
        out[i] = log[i];
        if (log[i] == '\n')
            lines++;
        i++;
    }
    out[i] = '\0';
}

/* The headers every kernel sees, handed to NVRTC in memory: the constants
 * the host shares with the kernels, the PTX helpers, and the batch kernel's
 * tiles. Their text is part of every cubin's cache key (cubin_locked), in
 * this order. */
static const char *const header_names[] = {"p2pt_kernel_abi.h", "tma_ptx.cuh", "batch_tiles.cuh"};
static const char *const header_texts[] = {p2pt__p2pt_kernel_abi_source, p2pt__tma_ptx_source,
                                           p2pt__batch_tiles_source};
#define N_HEADERS ((int)P2PT_ARRAY_LEN(header_names))

int p2pt__jit_headers(const char *const **names, const char *const **texts)
{
    *names = header_names;
    *texts = header_texts;
    return N_HEADERS;
}

/* The options every kernel is compiled with, besides the architecture and
 * its own defines, and the text of them that goes into the cache key. */
static void options_id(const char *const *defines, char *out, size_t len)
{
    size_t used = (size_t)snprintf(out, len, "%s", JIT_OPTIONS_ID);
    for (size_t i = 0; defines != NULL && defines[i] != NULL && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, " %s", defines[i]);
}

/* Compile `source`; `target` is "sm_90" (cubin) or "compute_90" (PTX). The
 * output buffer is malloc'd; every NVRTC object is released on every path. */
static p2pt_status compile(const char *source, const char *file, const char *const *defines,
                           const char *target, bool want_ptx, const char *nvrtc_path, void **out,
                           size_t *out_size, bool *source_error)
{
    p2pt_status st = P2PT_SUCCESS;
    nvrtcProgram prog = NULL;
    char *log = NULL;
    char *buf = NULL;
    char arch_opt[48];
    const char *opts[3 + 8];
    int n_opts = 0;

    *out = NULL;
    *source_error = false;
    P2PT_TRY(p2pt__nvrtc_load(nvrtc_path));
    snprintf(arch_opt, sizeof(arch_opt), "--gpu-architecture=%s", target);
    opts[n_opts++] = arch_opt;
    opts[n_opts++] = JIT_OPT_STD;
    for (size_t i = 0; defines != NULL && defines[i] != NULL && n_opts < 10; i++)
        opts[n_opts++] = defines[i];
    /* -minimal (NVRTC 12.4+) leaves out texture types and device-runtime
     * declarations the kernels never use: it roughly halves the compile, the
     * bulk of a cold process's first TMA copy. Older NVRTCs reject the
     * option; they get the full front end. */
    opts[n_opts++] = JIT_OPT_MINIMAL; /* last, so it can be dropped */
    P2PT_NVRTC(p2pt__nv.nvrtcCreateProgram(&prog, source, "p2pt_kernel.cu", N_HEADERS,
                                           header_texts, header_names));
    nvrtcResult cr = p2pt__nv.nvrtcCompileProgram(prog, n_opts, opts);
    if (cr == NVRTC_ERROR_INVALID_OPTION) {
        p2pt__nv.nvrtcDestroyProgram(&prog);
        P2PT_NVRTC(p2pt__nv.nvrtcCreateProgram(&prog, source, "p2pt_kernel.cu", N_HEADERS,
                                               header_texts, header_names));
        cr = p2pt__nv.nvrtcCompileProgram(prog, n_opts - 1, opts);
    }
    if (cr != NVRTC_SUCCESS) {
        size_t log_size = 0;
        char excerpt[1200] = "(no log)";
        const char *what = file != NULL ? file : "the given kernel source";
        if (p2pt__nv.nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS &&
            log_size > 1 && (log = malloc(log_size)) != NULL &&
            p2pt__nv.nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
            log_excerpt(log, excerpt, sizeof(excerpt));
        *source_error = cr == NVRTC_ERROR_COMPILATION;
        st = p2pt__fail(P2PT_COMPILE_ERROR, "NVRTC could not compile %s for %s: %s; log:\n%s",
                        what, target, p2pt__nv.nvrtcGetErrorString(cr), excerpt);
        goto out;
    }
    size_t size = 0;
    if (want_ptx)
        P2PT_NVRTC(p2pt__nv.nvrtcGetPTXSize(prog, &size));
    else
        P2PT_NVRTC(p2pt__nv.nvrtcGetCUBINSize(prog, &size));
    buf = malloc(size + 1);
    if (buf == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory for a %zu-byte %s",
                        size, want_ptx ? "PTX" : "cubin");
        goto out;
    }
    if (want_ptx)
        P2PT_NVRTC(p2pt__nv.nvrtcGetPTX(prog, buf));
    else
        P2PT_NVRTC(p2pt__nv.nvrtcGetCUBIN(prog, buf));
    buf[size] = '\0';
    *out = buf;
    *out_size = size;
    buf = NULL;
out:
    free(buf);
    free(log);
    if (prog != NULL)
        p2pt__nv.nvrtcDestroyProgram(&prog);
    return st;
}

p2pt_status p2pt__jit_compile(const char *source, const char *const *defines, int arch,
                              const char *nvrtc_path, void **cubin, size_t *cubin_size)
{
    char target[16];
    bool source_error;
    snprintf(target, sizeof(target), "sm_%d", arch);
    return compile(source, NULL, defines, target, false, nvrtc_path, cubin, cubin_size,
                   &source_error);
}

p2pt_status p2pt__jit_compile_ptx(const char *source, const char *const *defines, int arch,
                                  const char *nvrtc_path, char **ptx)
{
    char target[16];
    size_t size;
    bool source_error;
    snprintf(target, sizeof(target), "compute_%d", arch);
    return compile(source, NULL, defines, target, true, nvrtc_path, (void **)ptx, &size,
                   &source_error);
}

/* Compile into `slot` with NVRTC and save the cubin to the cache. A cache
 * that cannot be written costs only the log line. */
static void compile_slot(struct cubin_slot *slot, const struct p2pt_config *cfg,
                         struct jit_notes *jn)
{
    char why[P2PT_PATH_MAX + 256];
    free(slot->cubin);
    free(slot->error);
    slot->cubin = NULL;
    slot->error = NULL;
    slot->from_disk = false;
    atomic_fetch_add(&compilations, 1);
    const struct p2pt_kernel *k = slot->kernel;
    char target[16];
    snprintf(target, sizeof(target), "sm_%d", slot->arch);
    bool source_error = false;
    slot->status = compile(k->source, k->file, k->defines, target, false, cfg->nvrtc_library,
                           &slot->cubin, &slot->size, &source_error);
    slot->retry = slot->status != P2PT_SUCCESS && !source_error;
    if (slot->status != P2PT_SUCCESS) {
        slot->error = strdup(p2pt__last_error_text());
        return;
    }
    if (cfg->cache_dir[0] == '\0')
        return;
    if (p2pt__cubin_cache_write(cfg->cache_dir, slot->cache_name, slot->cubin, slot->size,
                                why, sizeof(why)))
        note(jn, P2PT_LOG_INFO, "%s: compiled for sm_%d and saved to %s", k->name,
             slot->arch, why);
    else
        note(jn, P2PT_LOG_INFO, "%s: compiled for sm_%d; not cached: %s", k->name,
             slot->arch, why);
}

/* A new slot's cubin: from the cubin cache, else compiled. Sets
 * slot->status (and slot->error on failure). */
static void fill_slot(struct cubin_slot *slot, const struct p2pt_config *cfg,
                      struct jit_notes *jn)
{
    const struct p2pt_kernel *k = slot->kernel;
    char why[P2PT_PATH_MAX + 256], opts[256];
    /* Everything NVRTC reads shapes the cubin: the kernel, the headers and
     * the options. */
    size_t len = strlen(k->source);
    for (int i = 0; i < N_HEADERS; i++)
        len += strlen(header_texts[i]);
    char *all = malloc(len + 1);
    if (all == NULL) {
        slot->status = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        slot->error = strdup(p2pt__last_error_text());
        return;
    }
    strcpy(all, k->source);
    for (int i = 0; i < N_HEADERS; i++)
        strcat(all, header_texts[i]);
    options_id(k->defines, opts, sizeof(opts));
    p2pt__cubin_cache_name(slot->cache_name, sizeof(slot->cache_name), k->name, all, opts,
                           slot->arch);
    free(all);
    enum p2pt_cache_result r = p2pt__cubin_cache_read(cfg->cache_dir, slot->cache_name,
                                                      &slot->cubin, &slot->size, why,
                                                      sizeof(why));
    if (r == P2PT_CACHE_HIT) {
        slot->status = P2PT_SUCCESS;
        slot->from_disk = true;
        note(jn, P2PT_LOG_INFO, "%s: sm_%d cubin read from the cubin cache, %s", k->name,
             slot->arch, why);
    } else {
        if (r == P2PT_CACHE_UNUSABLE)
            note(jn, P2PT_LOG_WARN, "%s: cubin cache skipped (%s); compiling with NVRTC",
                 k->name, why);
        compile_slot(slot, cfg, jn);
    }
}

/* pthread_once takes no argument: fill_slot's comes through this thread's
 * slot_arg, set just before the call (the routine runs on the calling
 * thread). */
static _Thread_local struct {
    struct cubin_slot *slot;
    const struct p2pt_config *cfg;
    struct jit_notes *jn;
    bool ran; /* the once ran on this call */
} slot_arg;

static void fill_slot_once(void)
{
    slot_arg.ran = true;
    fill_slot(slot_arg.slot, slot_arg.cfg, slot_arg.jn);
}

/* The cubin of kernel `k` for `arch`: from this process, else (once per
 * slot, under its pthread_once) from the cubin cache or compiled. Caller
 * holds jit_lock. */
static p2pt_status cubin_locked(const struct p2pt_kernel *k, int arch,
                                const struct p2pt_config *cfg, struct jit_notes *jn,
                                struct cubin_slot **out)
{
    static const pthread_once_t once_init = PTHREAD_ONCE_INIT;
    struct cubin_slot *slot = NULL;
    for (size_t i = 0; i < n_cubins && slot == NULL; i++)
        if (cubins[i].kernel == k && cubins[i].arch == arch)
            slot = &cubins[i];
    if (slot == NULL) {
        if (n_cubins == MAX_SLOTS)
            return p2pt__fail(P2PT_INTERNAL_ERROR,
                              "more than %d (kernel, GPU architecture) pairs in one process",
                              MAX_SLOTS);
        slot = &cubins[n_cubins++];
        slot->kernel = k;
        slot->arch = arch;
        slot->once = once_init;
    }
    slot_arg.slot = slot;
    slot_arg.cfg = cfg;
    slot_arg.jn = jn;
    slot_arg.ran = false;
    pthread_once(&slot->once, fill_slot_once);
    /* A failure that was not the source's (NVRTC out of memory, a failed
     * nvrtcGetCUBIN) is not kept: the next use compiles again, outside the
     * once that filled the slot first. */
    if (!slot_arg.ran && slot->status != P2PT_SUCCESS && slot->retry)
        compile_slot(slot, cfg, jn);
    *out = slot;
    if (slot->status != P2PT_SUCCESS)
        return p2pt__fail(slot->status, "%s", slot->error ? slot->error : "compile failed");
    return P2PT_SUCCESS;
}

/* A failed query fails the load, naming the entry: a made-up value would
 * read as a wrong compute capability or size the grid wrongly. */
#define ATTR(v, a) P2PT_CU(p2pt__cu.cuDeviceGetAttribute(&(v), a, dev))

/* The driver's refusals of an image itself, which a cubin compiled here
 * again answers (an H200's driver says CUDA_ERROR_UNKNOWN of an EM_CUDA
 * file it cannot parse); anything else (out of memory, a context gone) is
 * the moment's, and a good cached cubin stays. */
static bool image_refused(CUresult r)
{
    return r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
           r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
           r == CUDA_ERROR_INVALID_SOURCE || r == CUDA_ERROR_UNKNOWN;
}

/* Load kernel `k` into `ctx` (made current by the caller). */
static p2pt_status load_module_locked(CUcontext ctx, unsigned long long id,
                                      const struct p2pt_kernel *k, const struct p2pt_config *cfg,
                                      struct jit_notes *jn, struct p2pt_module *m)
{
    p2pt_status st = P2PT_SUCCESS;
    CUmodule mod = NULL;
    CUdevice dev;
    struct cubin_slot *slot = NULL;

    P2PT_CU(p2pt__cu.cuCtxGetDevice(&dev));
    int major = 0, minor = 0, optin = 0, sm_count = 0, smem_per_sm = 0;
    ATTR(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    ATTR(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    if (major * 10 + minor < k->min_cc) {
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "the %s kernel (TMA) needs compute capability %d.%d, device %d is "
                        "%d.%d; use P2P_TRANSPORT=%s on this device",
                        k->name, k->min_cc / 10, k->min_cc % 10, (int)dev, major, minor,
                        cfg->fallback);
        goto out;
    }
    P2PT_TRY(cubin_locked(k, major * 10 + minor, cfg, jn, &slot));
    CUresult lr = p2pt__cu.cuModuleLoadData(&mod, slot->cubin);
    if (slot->from_disk && image_refused(lr)) {
        /* Complete as a file but refused by this driver (an older driver,
         * a damaged section): compile it here and replace the file. */
        note(jn, P2PT_LOG_WARN,
             "%s: the driver refused the cached cubin %s/%s (%s); compiling again", k->name,
             cfg->cache_dir, slot->cache_name, p2pt__cuda_error_name(lr));
        compile_slot(slot, cfg, jn);
        if (slot->status != P2PT_SUCCESS) {
            st = p2pt__fail(slot->status, "%s", slot->error ? slot->error : "compile failed");
            goto out;
        }
        lr = p2pt__cu.cuModuleLoadData(&mod, slot->cubin);
    }
    P2PT_CU_RESULT(lr, "p2pt__cu.cuModuleLoadData(&mod, slot->cubin)");
    if (slot->from_disk && !slot->hit_counted) {
        slot->hit_counted = true;
        atomic_fetch_add(&cache_hits, 1);
    }
    ATTR(optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    ATTR(sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    ATTR(smem_per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    for (int e = 0; e < P2PT_KERNEL_MAX_ENTRIES && k->entries[e] != NULL; e++) {
        P2PT_CU(p2pt__cu.cuModuleGetFunction(&m->fn[e], mod, k->entries[e]));
        /* Raise the dynamic limit to all the device allows once; each launch
         * still asks only for what it uses. Kernels with only static shared
         * memory keep the default (their static part may pass the reserve). */
        if (k->dynamic_smem)
            P2PT_CU(p2pt__cu.cuFuncSetAttribute(m->fn[e],
                                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                optin - STATIC_SMEM_RESERVE));
    }
    m->ctx = ctx;
    m->ctx_id = id;
    m->kernel = k;
    m->device = dev;
    m->ordinal = (int)dev;
    m->sm_count = sm_count;
    m->smem_per_block_optin = optin - STATIC_SMEM_RESERVE;
    m->smem_per_sm = smem_per_sm;
    m->module = mod;
    mod = NULL;
    atomic_fetch_add(&module_loads, 1);
out:
    if (mod != NULL)
        p2pt__cu.cuModuleUnload(mod);
    return st;
}

p2pt_status p2pt__jit_module(CUcontext ctx, const struct p2pt_kernel *k,
                             const struct p2pt_config *cfg, const struct p2pt_logger *log,
                             const CUstream *capture_stream, const struct p2pt_module **out)
{
    p2pt_status st = P2PT_SUCCESS;
    unsigned long long id = 0;
    bool locked = false, pushed = false;
    struct jit_notes notes;
    notes.n = 0;

    P2PT_CU(p2pt__cu.cuCtxGetId(ctx, &id));
    for (int i = 0; i < LAST_MODULES; i++) {
        const struct p2pt_module *hit = last_module[i];
        if (hit != NULL && hit->kernel == k && hit->ctx == ctx && hit->ctx_id == id) {
            *out = hit;
            return P2PT_SUCCESS;
        }
    }

    pthread_mutex_lock(&jit_lock);
    locked = true;
    /* A node whose ctx matches but whose id does not belongs to a destroyed
     * context (its module went with it). It is left in place, never
     * rewritten: another thread's last_module may still point at it. */
    struct module_node *node = NULL;
    for (struct module_node *n = modules; n != NULL; n = n->next) {
        if (n->m.ctx == ctx && n->m.ctx_id == id && n->m.kernel == k)
            node = n;
    }
    if (node == NULL) {
        if (capture_stream != NULL) {
            CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
            P2PT_CU(p2pt__cu.cuStreamIsCapturing(*capture_stream, &cs));
            if (cs != CU_STREAM_CAPTURE_STATUS_NONE) {
                st = p2pt__fail(P2PT_INVALID_USAGE,
                                "the %s kernel is not loaded in this stream's context "
                                "yet and the stream is capturing a CUDA graph; call "
                                "prepare(device) for this device before capture",
                                k->name);
                goto out;
            }
        }
        CUcontext cur = NULL;
        P2PT_CU(p2pt__cu.cuCtxGetCurrent(&cur));
        if (cur != ctx) {
            P2PT_CU(p2pt__cu.cuCtxPushCurrent(ctx));
            pushed = true;
        }
        struct p2pt_module m;
        memset(&m, 0, sizeof(m));
        P2PT_TRY(load_module_locked(ctx, id, k, cfg, &notes, &m));
        node = calloc(1, sizeof(*node));
        if (node == NULL) {
            p2pt__cu.cuModuleUnload(m.module);
            st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
            goto out;
        }
        node->m = m;
        node->next = modules;
        modules = node;
    }
    /* Remember it in this thread's slot for the kernel, or take the slot of
     * the kernel used longest ago (the last one, after a shift). */
    int at = LAST_MODULES - 1;
    for (int i = 0; i < LAST_MODULES; i++)
        if (last_module[i] == NULL || last_module[i]->kernel == k) {
            at = i;
            break;
        }
    for (int i = at; i > 0; i--)
        last_module[i] = last_module[i - 1];
    last_module[0] = &node->m;
    *out = &node->m;
out:
    if (pushed) {
        CUcontext popped;
        p2pt__cu.cuCtxPopCurrent(&popped);
    }
    if (locked)
        pthread_mutex_unlock(&jit_lock);
    for (int i = 0; i < notes.n; i++)
        p2pt__log(log, notes.line[i].level, __FILE__, __LINE__, "%s", notes.line[i].text);
    return st;
}
