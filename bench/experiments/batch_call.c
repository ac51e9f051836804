/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host time per piece of one host batch (p2pt_copy_batch_async,
 * p2pt_explain_batch, p2pt_copy_blocks_async, p2pt_explain_blocks) on the
 * library alone, under each transport, over any driver p2pt can load. Over
 * the fake driver of the tests (tests/fault/fake_cuda.c: launches do
 * nothing, a copy is a memcpy under its lock) it is the library's own work
 * plus what the fake does per driver call and, for the copy engine's real
 * runs, per piece: the dry runs (explain) are the library's pass alone.
 *
 * Shapes: 64-byte pieces scattered over device memory (no two adjacent, so
 * the copy engine groups nothing) at 256, 1024 and 16384 (the TMA staging
 * ring, which takes more than 128 outside capture) and 16384 on a
 * capturing stream (no ring: more than one launch's worth of kernel
 * parameters); the same scattered from device to pinned host memory; and
 * blocks, 32 layers x 256 blocks of 64 bytes from device to pinned host
 * memory. Each line: the best and the median of
 * RUNS calls (default 301), divided by the pieces; TRANSPORT (ce, tma or
 * auto) and SHAPE (part of a shape's name) keep only those. Build and run
 * from the repository root, after a build in build/:
 *
 *   cc -O2 -Iinclude bench/experiments/batch_call.c -o /tmp/batch_call \
 *      -Lbuild -lp2pt -ldl -Wl,-rpath,$PWD/build
 *   P2P_CUDA_LIBRARY=build/libp2pt_fake_cuda.so \
 *      P2P_NVRTC_LIBRARY=build/libp2pt_fake_nvrtc.so /tmp/batch_call
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "p2pt.h"
#include "host_call.h"

typedef int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

enum { MAX_N = 16384, PIECE = 64, STRIDE = 192, LAYERS = 32, ROWS = 256 };

static struct {
    CUresult (*retain)(CUcontext *, int);
    CUresult (*set_current)(CUcontext);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*host_alloc)(void **, size_t, unsigned);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*begin_capture)(CUstream, int);
    CUresult (*sync)(CUstream);
} cu;

/* One shape: what to call on which pieces. */
struct shape {
    const char *name;
    const p2pt_copy_desc *d;
    size_t n;
    const p2pt_block_layer *layers; /* not NULL: blocks */
    const int64_t *map;
    CUstream stream;
};

static int run(p2pt_handle *h, const struct shape *s, int dry, int runs, const char *transport)
{
    double *t = malloc((size_t)runs * sizeof(*t));
    p2pt_choice c;
    const size_t pieces = s->layers ? (size_t)LAYERS * ROWS : s->n;
    for (int k = -3; k < runs; k++) {
        memset(&c, 0, sizeof(c));
        c.size = sizeof(c);
        cu.sync(s->stream);
        const double t0 = now_ns();
        p2pt_status st;
        if (s->layers)
            st = dry ? p2pt_explain_blocks(h, s->layers, LAYERS, s->map, ROWS, s->stream, &c)
                     : p2pt_copy_blocks_async(h, s->layers, LAYERS, s->map, ROWS, s->stream);
        else
            st = dry ? p2pt_explain_batch(h, s->d, s->n, s->stream, &c)
                     : p2pt_copy_batch_async(h, s->d, s->n, s->stream);
        const double dt = now_ns() - t0;
        if (st != P2PT_SUCCESS) {
            fprintf(stderr, "batch_call: %s %s: %s\n", transport, s->name, p2pt_last_error(h));
            free(t);
            return 1;
        }
        if (k >= 0)
            t[k] = dt;
    }
    qsort(t, (size_t)runs, sizeof(*t), cmp);
    printf("%-5s %-7s %-28s %6zu pieces: best %6.2f ns/piece, median %6.2f ns/piece%s%s\n",
           transport, dry ? "explain" : "real", s->name, pieces, t[0] / pieces,
           t[runs / 2] / pieces, dry ? "  -> " : "", dry ? c.transport : "");
    free(t);
    return 0;
}

int main(void)
{
    const char *const names[] = {"cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc",
                                 "cuMemHostAlloc", "cuStreamCreate", "cuStreamBeginCapture",
                                 "cuStreamSynchronize"};
    enum { N_NAMES = sizeof(names) / sizeof(names[0]) };
    void *f[N_NAMES] = {0};
    if (driver_entries("batch_call", names, f, N_NAMES) == NULL)
        return 1;
    cu.retain = (CUresult(*)(CUcontext *, int))f[0];
    cu.set_current = (CUresult(*)(CUcontext))f[1];
    cu.mem_alloc = (CUresult(*)(CUdeviceptr *, size_t))f[2];
    cu.host_alloc = (CUresult(*)(void **, size_t, unsigned))f[3];
    cu.stream_create = (CUresult(*)(CUstream *, unsigned))f[4];
    cu.begin_capture = (CUresult(*)(CUstream, int))f[5];
    cu.sync = (CUresult(*)(CUstream))f[6];
    CUcontext c;
    CUdeviceptr src, dst;
    void *host;
    CUstream plain, capturing;
    const size_t span = (size_t)MAX_N * STRIDE;
    if (cu.retain(&c, 0) || cu.set_current(c) || cu.mem_alloc(&src, span) ||
        cu.mem_alloc(&dst, span) || cu.host_alloc(&host, span, 0) ||
        cu.stream_create(&plain, 1) || cu.stream_create(&capturing, 1) ||
        cu.begin_capture(capturing, 0)) {
        fprintf(stderr, "batch_call: the driver refused the set-up\n");
        return 1;
    }
    /* Scattered: piece i writes slot (i * 7919) % MAX_N, never next to
     * piece i - 1's. */
    static p2pt_copy_desc local[MAX_N], d2h[MAX_N];
    for (size_t i = 0; i < MAX_N; i++) {
        const size_t at = (i * 7919) % MAX_N * STRIDE;
        local[i] = (p2pt_copy_desc){(void *)(uintptr_t)(dst + at),
                                    (const void *)(uintptr_t)(src + i * STRIDE), PIECE};
        d2h[i] = (p2pt_copy_desc){(char *)host + at, (const void *)(uintptr_t)(src + i * STRIDE),
                                  PIECE};
    }
    p2pt_block_layer layers[LAYERS];
    const size_t per_layer = span / LAYERS;
    for (int l = 0; l < LAYERS; l++)
        layers[l] = (p2pt_block_layer){sizeof(layers[l]), (char *)host + l * per_layer,
                                       (void *)(uintptr_t)(src + l * per_layer), PIECE,
                                       per_layer / PIECE, per_layer / PIECE};
    static int64_t map[2 * ROWS];
    for (int r = 0; r < ROWS; r++) {
        map[2 * r] = (r * 7) % (int64_t)(per_layer / PIECE);
        map[2 * r + 1] = (r * 13) % (int64_t)(per_layer / PIECE);
    }
    const struct shape shapes[] = {
        {"local", local, 256, NULL, NULL, plain},
        {"local", local, 1024, NULL, NULL, plain},
        {"local", local, MAX_N, NULL, NULL, plain},
        {"local, capturing", local, MAX_N, NULL, NULL, capturing},
        {"d2h", d2h, 1024, NULL, NULL, plain},
        {"d2h", d2h, MAX_N, NULL, NULL, plain},
        {"d2h, capturing", d2h, MAX_N, NULL, NULL, capturing},
        {"blocks d2h 32x256", NULL, 0, layers, map, plain},
    };
    const char *transports[] = {"ce", "tma", "auto"};
    const int runs = getenv("RUNS") ? atoi(getenv("RUNS")) : 301;
    const char *only = getenv("TRANSPORT"), *shape = getenv("SHAPE");
    for (size_t k = 0; k < sizeof(transports) / sizeof(transports[0]); k++) {
        if (only != NULL && strcmp(only, transports[k]) != 0)
            continue;
        p2pt_init_args a = {sizeof(a), NULL, transports[k], NULL};
        p2pt_handle *h;
        if (p2pt_init(&a, &h) != P2PT_SUCCESS || p2pt_prepare(h, 0) != P2PT_SUCCESS) {
            fprintf(stderr, "batch_call: %s\n", p2pt_last_error(NULL));
            return 1;
        }
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
            for (int dry = 1; dry >= 0; dry--)
                if ((shape == NULL || strstr(shapes[i].name, shape) != NULL) &&
                    run(h, &shapes[i], dry, runs, transports[k]) != 0)
                    return 1;
        p2pt_finalize(h);
    }
    return 0;
}
