/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NVRTC, reached at run time like the driver: a build of p2pt does not pin an
 * NVRTC version, and a process that never uses the TMA transport never loads
 * it. Opened once per process; the outcome is kept.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "nvrtc_loader.h"

struct p2pt_nvrtc p2pt__nv;

static struct p2pt_once load_once = P2PT_ONCE_INIT;

static p2pt_status load_locked(const char *path)
{
    /* The sonames NVRTC has shipped under, newest first, then the same names
     * in the usual toolkit folders, which are often not on the loader's path. */
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12"};
    char candidates[12][P2PT_PATH_MAX];
    size_t n = 0;
    if (path != NULL && path[0] != '\0') {
        snprintf(candidates[n++], P2PT_PATH_MAX, "%s", path);
    } else {
        const char *dirs[3] = {NULL, getenv("CUDA_HOME"), "/usr/local/cuda"};
        for (size_t d = 0; d < 3; d++) {
            if (d > 0 && (dirs[d] == NULL || dirs[d][0] == '\0'))
                continue;
            for (size_t i = 0; i < P2PT_ARRAY_LEN(names); i++) {
                if (d == 0)
                    snprintf(candidates[n++], P2PT_PATH_MAX, "%s", names[i]);
                else
                    snprintf(candidates[n++], P2PT_PATH_MAX, "%s/lib64/%s", dirs[d],
                             names[i]);
            }
        }
    }

    char tried[1536] = "";
    size_t used = 0;
    void *lib = NULL;
    for (size_t i = 0; i < n && lib == NULL; i++) {
        lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL && used < sizeof(tried)) {
            const char *why = dlerror();
            int w = snprintf(tried + used, sizeof(tried) - used, "%s%s (%s)",
                             used ? "; " : "", candidates[i], why ? why : "?");
            if (w > 0)
                used += (size_t)w;
        }
    }
    if (lib == NULL)
        return p2pt__fail(P2PT_COMPILE_ERROR,
                          "cannot load NVRTC, needed to compile the TMA kernel; "
                          "tried: %s. Install the CUDA toolkit's NVRTC or set "
                          "P2P_NVRTC_LIBRARY",
                          tried);

    struct p2pt_nvrtc t;
    memset(&t, 0, sizeof(t));
    static const char *const syms[] = {
        "nvrtcVersion", "nvrtcGetErrorString", "nvrtcCreateProgram",
        "nvrtcDestroyProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize",
        "nvrtcGetProgramLog", "nvrtcGetCUBINSize", "nvrtcGetCUBIN",
        "nvrtcGetPTXSize", "nvrtcGetPTX"};
    /* Same order as struct p2pt_nvrtc: it holds only function pointers. */
    _Static_assert(sizeof(struct p2pt_nvrtc) == 11 * sizeof(void (*)(void)),
                   "keep syms[] in step with struct p2pt_nvrtc");
    for (size_t i = 0; i < P2PT_ARRAY_LEN(syms); i++) {
        void *fn = dlsym(lib, syms[i]);
        if (fn == NULL) {
            dlclose(lib);
            return p2pt__fail(P2PT_COMPILE_ERROR, "NVRTC library has no %s", syms[i]);
        }
        memcpy((char *)&t + i * sizeof(void *), &fn, sizeof(fn));
    }
    p2pt__nv = t;
    return P2PT_SUCCESS;
}

p2pt_status p2pt__nvrtc_load(const char *path)
{
    return p2pt__once(&load_once, load_locked, path);
}

p2pt_status p2pt__nvrtc_fail(nvrtcResult r, const char *call, const char *file, int line)
{
    const char *desc =
        p2pt__nv.nvrtcGetErrorString ? p2pt__nv.nvrtcGetErrorString(r) : "no description";
    const char *base = strrchr(file, '/');
    return p2pt__fail(P2PT_COMPILE_ERROR, "%s failed: %s (%d) at %s:%d", call, desc, (int)r,
                      base ? base + 1 : file, line);
}
