/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL through dlopen: the declarations below are the few nccl.h gives
 * (their values are the library's ABI), so the benchmark builds without
 * NCCL's headers and runs without NCCL until the alltoall mode asks for
 * it. Every NCCL call's result is checked; the text names the call, the
 * rank and NCCL's own words.
 */
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

typedef int nccl_result;     /* ncclResult_t: 0 is ncclSuccess */
typedef void *nccl_comm;     /* ncclComm_t */
#define NCCL_INT8 0          /* ncclDataType_t ncclInt8: a count is bytes */
#define NCCL_IN_PROGRESS 7   /* ncclInProgress: a non-blocking call still working */

static nccl_result (*get_version)(int *version);
static nccl_result (*comm_init_all)(nccl_comm *comms, int ndev, const int *devlist);
static nccl_result (*comm_destroy)(nccl_comm comm);
static nccl_result (*comm_abort)(nccl_comm comm);
static nccl_result (*comm_async_error)(nccl_comm comm, nccl_result *err);
static const char *(*error_string)(nccl_result r);
static const char *(*last_error)(nccl_comm comm); /* NCCL 2.13 and later; may be NULL */
static nccl_result (*group_start)(void);
static nccl_result (*group_end)(void);
static nccl_result (*nccl_send)(const void *buf, size_t count, int type, int peer,
                                nccl_comm comm, CUstream s);
static nccl_result (*nccl_recv)(void *buf, size_t count, int type, int peer, nccl_comm comm,
                                CUstream s);

/* Records why `call` failed: NCCL's name for the result and, where this
 * NCCL keeps one, its last error text. */
static void nccl_fail(nccl_result r, const char *call, nccl_comm comm)
{
    const char *what = error_string ? error_string(r) : "?";
    const char *detail = last_error ? last_error(comm) : NULL;
    bench_set_err("%s failed: %s (ncclResult_t %d)%s%s", call, what ? what : "?", r,
                  detail && detail[0] ? ": " : "", detail && detail[0] ? detail : "");
}

/* `pattern` + "/nvidia/nccl/lib/libnccl.so.2": the copy PyTorch's wheels
 * install (the nvidia-nccl package), under the folders Python packages
 * live in. */
static const char *const site_patterns[] = {
    "$VIRTUAL_ENV/lib/python3*/site-packages",
    "/opt/torch/.venv/lib/python3*/site-packages",
    "/usr/local/lib/python3*/dist-packages",
    "/usr/local/lib/python3*/site-packages",
    "/usr/lib/python3/dist-packages",
    "/usr/lib/python3*/dist-packages",
    "/opt/conda/lib/python3*/site-packages",
    "$HOME/.local/lib/python3*/site-packages",
    "$HOME/.pyenv/versions/*/lib/python3*/site-packages",
};

/* The site folders' copies: every match of every pattern, and the
 * patterns that matched nothing named in `tried` as they are. */
static bool try_sites(struct bench_nccl *n, char *tried, size_t len)
{
    for (size_t i = 0; i < P2PT_ARRAY_LEN(site_patterns); i++) {
        const char *p = site_patterns[i], *var = NULL;
        char pattern[512];
        if (p[0] == '$') {
            var = strncmp(p, "$HOME", 5) == 0 ? "HOME" : "VIRTUAL_ENV";
            const char *v = getenv(var);
            if (v == NULL || v[0] == '\0')
                continue;
            snprintf(pattern, sizeof(pattern), "%s%s/nvidia/nccl/lib/libnccl.so.2", v,
                     p + strlen(var) + 1);
        } else {
            snprintf(pattern, sizeof(pattern), "%s/nvidia/nccl/lib/libnccl.so.2", p);
        }
        glob_t g;
        memset(&g, 0, sizeof(g));
        int r = glob(pattern, 0, NULL, &g);
        if (r != 0) {
            snprintf(tried + strlen(tried), len - strlen(tried), "%s%s (no match)",
                     tried[0] ? ", " : "", pattern);
            globfree(&g);
            continue;
        }
        n->lib = bench_dlopen_first((const char *const *)g.gl_pathv, g.gl_pathc, n->path,
                                    sizeof(n->path), tried, len);
        globfree(&g);
        if (n->lib != NULL)
            return true;
    }
    return false;
}

bool bench_nccl_load(struct bench_nccl *n, const char *path)
{
    memset(n, 0, sizeof(*n));
    char tried[1536] = "";
    if (path != NULL) {
        n->lib = bench_dlopen_first(&path, 1, n->path, sizeof(n->path), tried, sizeof(tried));
        if (n->lib == NULL) {
            const char *why = dlerror();
            bench_set_err("NCCL could not be loaded from --nccl %s: %s", path,
                          why ? why : "dlopen failed");
            return false;
        }
    } else {
        const char *home = getenv("CUDA_HOME");
        char cand[512];
        const char *names[3];
        size_t k = 0;
        names[k++] = "libnccl.so.2";
        if (home != NULL && home[0] != '\0') {
            snprintf(cand, sizeof(cand), "%s/lib64/libnccl.so.2", home);
            names[k++] = cand;
        }
        names[k++] = "/usr/local/cuda/lib64/libnccl.so.2";
        n->lib = bench_dlopen_first(names, k, n->path, sizeof(n->path), tried, sizeof(tried));
        if (n->lib == NULL && !try_sites(n, tried, sizeof(tried))) {
            bench_set_err("NCCL could not be loaded (tried %s; --nccl PATH names another)",
                          tried);
            return false;
        }
    }
    *(void **)&get_version = dlsym(n->lib, "ncclGetVersion");
    *(void **)&comm_init_all = dlsym(n->lib, "ncclCommInitAll");
    *(void **)&comm_destroy = dlsym(n->lib, "ncclCommDestroy");
    *(void **)&comm_abort = dlsym(n->lib, "ncclCommAbort");
    *(void **)&comm_async_error = dlsym(n->lib, "ncclCommGetAsyncError");
    *(void **)&error_string = dlsym(n->lib, "ncclGetErrorString");
    *(void **)&last_error = dlsym(n->lib, "ncclGetLastError");
    *(void **)&group_start = dlsym(n->lib, "ncclGroupStart");
    *(void **)&group_end = dlsym(n->lib, "ncclGroupEnd");
    *(void **)&nccl_send = dlsym(n->lib, "ncclSend");
    *(void **)&nccl_recv = dlsym(n->lib, "ncclRecv");
    if (!get_version || !comm_init_all || !comm_destroy || !comm_abort || !comm_async_error ||
        !error_string || !group_start || !group_end || !nccl_send || !nccl_recv) {
        bench_set_err("%s is not an NCCL 2.7 or later (no ncclSend, ncclRecv, "
                      "ncclCommInitAll, ncclCommAbort or ncclCommGetAsyncError)",
                      n->path);
        dlclose(n->lib);
        n->lib = NULL;
        return false;
    }
    nccl_result r = get_version(&n->version);
    if (r != 0) {
        nccl_fail(r, "ncclGetVersion", NULL);
        dlclose(n->lib);
        n->lib = NULL;
        return false;
    }
    return true;
}

bool bench_nccl_init(struct bench_nccl *n, const int *ordinals, int count)
{
    if (count > BENCH_NCCL_MAX_RANKS) {
        bench_set_err("%d GPUs: at most %d ranks here", count, BENCH_NCCL_MAX_RANKS);
        return false;
    }
    /* NVLink multicast (NVLS) stays off unless the caller set
     * NCCL_NVLS_ENABLE: sends and receives have no use for it, and the GPU
     * machines this benchmark runs on must not have it set up. */
    if (setenv("NCCL_NVLS_ENABLE", "0", 0) != 0) {
        bench_set_err("setenv NCCL_NVLS_ENABLE failed");
        return false;
    }
    nccl_result r = comm_init_all(n->comm, count, ordinals);
    if (r != 0) {
        memset(n->comm, 0, sizeof(n->comm));
        nccl_fail(r, "ncclCommInitAll", NULL);
        return false;
    }
    n->ranks = count;
    return true;
}

bool bench_nccl_group_start(struct bench_nccl *n)
{
    nccl_result r = group_start();
    if (r != 0) {
        nccl_fail(r, "ncclGroupStart", n->comm[0]);
        return false;
    }
    return true;
}

bool bench_nccl_group_end(struct bench_nccl *n)
{
    nccl_result r = group_end();
    if (r != 0) {
        nccl_fail(r, "ncclGroupEnd", n->comm[0]);
        return false;
    }
    return true;
}

/* ncclSend or ncclRecv of `bytes` between `rank` and `peer`, named in the
 * error with both ranks. */
static bool p2p_call(struct bench_nccl *n, bool send, int rank, CUdeviceptr buf, size_t bytes,
                     int peer, CUstream s)
{
    void *p = bench_dptr(buf);
    nccl_result r = send ? nccl_send(p, bytes, NCCL_INT8, peer, n->comm[rank], s)
                         : nccl_recv(p, bytes, NCCL_INT8, peer, n->comm[rank], s);
    if (r != 0) {
        char call[64];
        snprintf(call, sizeof(call),
                 send ? "ncclSend (rank %d to %d)" : "ncclRecv (rank %d from %d)", rank, peer);
        nccl_fail(r, call, n->comm[rank]);
        return false;
    }
    return true;
}

bool bench_nccl_send(struct bench_nccl *n, int rank, CUdeviceptr buf, size_t bytes, int peer,
                     CUstream s)
{
    return p2p_call(n, true, rank, buf, bytes, peer, s);
}

bool bench_nccl_recv(struct bench_nccl *n, int rank, CUdeviceptr buf, size_t bytes, int peer,
                     CUstream s)
{
    return p2p_call(n, false, rank, buf, bytes, peer, s);
}

bool bench_nccl_healthy(struct bench_nccl *n)
{
    for (int i = 0; i < n->ranks; i++) {
        nccl_result err = 0;
        nccl_result r = comm_async_error(n->comm[i], &err);
        if (r != 0) {
            nccl_fail(r, "ncclCommGetAsyncError", n->comm[i]);
            return false;
        }
        if (err != 0 && err != NCCL_IN_PROGRESS) {
            char call[64];
            snprintf(call, sizeof(call), "rank %d's communicator", i);
            nccl_fail(err, call, n->comm[i]);
            return false;
        }
    }
    return true;
}

void bench_nccl_close(struct bench_nccl *n, bool abort)
{
    for (int i = 0; i < n->ranks; i++) {
        if (n->comm[i] == NULL)
            continue;
        nccl_result r = abort ? comm_abort(n->comm[i]) : comm_destroy(n->comm[i]);
        if (r != 0) {
            nccl_fail(r, abort ? "ncclCommAbort" : "ncclCommDestroy", NULL);
            fprintf(stderr, "p2pt-bench: warning: %s\n", bench_err);
            bench_failures++;
        }
        n->comm[i] = NULL;
    }
    n->ranks = 0;
    /* NCCL's threads may outlive its communicators: the library stays
     * mapped until the process ends. */
}
