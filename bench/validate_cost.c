/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt-validate-cost: what P2P_TRANSPORT_VALIDATE=1 costs the caller per
 * copy, and what P2P_TRANSPORT=auto's decision costs.
 *
 * Host time of one p2pt_copy_async call (4 KiB, local, and peer when a second
 * GPU is there), validation on vs off, for both transports, measured in ONE
 * process with the two settings alternating batch by batch, so clock and
 * load drift hit both alike (separate runs differed by more than the effect).
 * Median over 31 batches of 1000 calls; the stream is drained between batches.
 * Each handle gets its setting through p2pt_init_args.options, so the two
 * live side by side without touching the process environment.
 *
 * auto's decision: the same 4 KiB local copy through an auto handle and
 * through a handle fixed on the engine auto picks, alternating the same
 * way; the difference is the decision. Twice: with the built-in table
 * (which sends it to tma) and with a table file that sends every copy to
 * ce, so both engines' paths are covered. The choice is checked with
 * p2pt_explain_copy first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_time.h"
#include "p2pt_internal.h"
#include "test_driver.h"

#define BATCHES 31
#define CALLS 1000
#define ROUTES 100000

static p2pt_handle *make_with(const char *transport, const char *options)
{
    p2pt_init_args a = {sizeof(a), NULL, transport, options};
    p2pt_handle *h = NULL;
    if (p2pt_init(&a, &h) != P2PT_SUCCESS || p2pt_prepare(h, 0) != P2PT_SUCCESS) {
        fprintf(stderr, "p2pt-validate-cost: %s\n", p2pt_last_error(NULL));
        exit(1);
    }
    return h;
}

static p2pt_handle *make(const char *transport, int validate)
{
    char options[64];
    snprintf(options, sizeof(options), "P2P_TRANSPORT_VALIDATE=%d", validate);
    return make_with(transport, options);
}

/* Median host time of one 4 KiB copy through h[0] and through h[1], in
 * alternating batches. */
static void alternate(p2pt_handle *h[2], CUdeviceptr d, CUdeviceptr src, CUstream s,
                      double out[2])
{
    double v[2][BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        for (int k = 0; k < 2; k++) {
            int which = (b % 2) ? 1 - k : k; /* alternate who goes first */
            double t0 = bench_now_us();
            for (int i = 0; i < CALLS; i++)
                if (p2pt_copy_async(h[which], (void *)d, (void *)src, 4096, s)) {
                    fprintf(stderr, "copy: %s\n", p2pt_last_error(NULL));
                    exit(1);
                }
            v[which][b] = (bench_now_us() - t0) / CALLS;
            tcu.cuStreamSynchronize(s);
        }
    }
    out[0] = bench_median(v[0], BATCHES);
    out[1] = bench_median(v[1], BATCHES);
}

/* auto against the engine it picks, with `table` ("" for the built-in). */
static void auto_cost(const char *table, CUdeviceptr d, CUdeviceptr src, CUstream s)
{
    char options[512];
    snprintf(options, sizeof(options), "P2P_TRANSPORT_AUTO_TABLE=%s", table);
    p2pt_handle *a = make_with("auto", table[0] ? options : NULL);
    p2pt_choice c;
    memset(&c, 0, sizeof(c));
    c.size = sizeof(c);
    if (p2pt_explain_copy(a, (void *)d, (void *)src, 4096, s, &c) != P2PT_SUCCESS) {
        fprintf(stderr, "explain: %s\n", p2pt_last_error(NULL));
        exit(1);
    }
    p2pt_handle *h[2] = {a, make(c.transport, 1)};
    double t[2];
    alternate(h, d, src, s, t);
    /* The decision alone: the router on one resolved request, auto's handle
     * against the fixed one, ROUTES calls each, alternating. */
    struct p2pt_request r;
    memset(&r, 0, sizeof(r));
    r.dst = (void *)d;
    r.src = (void *)src;
    r.bytes = 4096;
    r.stream = s;
    if (p2pt__resolve(&r) != P2PT_SUCCESS) {
        fprintf(stderr, "resolve: %s\n", p2pt_last_error(NULL));
        exit(1);
    }
    double v[2][BATCHES];
    for (int b = 0; b < BATCHES; b++)
        for (int k = 0; k < 2; k++) {
            int which = (b % 2) ? 1 - k : k;
            const struct p2pt_transport *t_out = NULL;
            double t0 = bench_now_us();
            for (int i = 0; i < ROUTES; i++)
                if (p2pt__route(h[which], &r, &t_out, NULL, 0) != P2PT_SUCCESS)
                    exit(1);
            v[which][b] = (bench_now_us() - t0) * 1000.0 / ROUTES;
        }
    double ra = bench_median(v[0], BATCHES), rf = bench_median(v[1], BATCHES);
    printf("%-9s %-5s %10.3f %10.3f %10.3f %9.1f %9.1f %9.1f   (%s)\n",
           table[0] ? "file" : "built-in", c.transport, t[0], t[1], t[0] - t[1], ra, rf, ra - rf,
           c.reason);
    p2pt_finalize(h[0]);
    p2pt_finalize(h[1]);
}

int main(void)
{
    if (p2pt_test_driver_load("libcuda.so.1") != P2PT_SUCCESS) {
        fprintf(stderr, "p2pt-validate-cost: no CUDA device: %s\n", p2pt__last_error_text());
        return 1;
    }
    int ndev = 0;
    tcu.cuDeviceGetCount(&ndev);
    CUcontext ctx;
    CUdevice dev;
    tcu.cuDeviceGet(&dev, 0);
    tcu.cuDevicePrimaryCtxRetain(&ctx, dev);
    tcu.cuCtxSetCurrent(ctx);
    CUdeviceptr src, dst, peer = 0;
    tcu.cuMemAlloc(&src, 1 << 20);
    tcu.cuMemAlloc(&dst, 1 << 20);
    if (ndev > 1) {
        p2pt_handle *h = make("ce", 1);
        if (p2pt_peer_enable(h, 0, 1) == P2PT_SUCCESS) {
            CUcontext c1;
            CUdevice d1;
            tcu.cuDeviceGet(&d1, 1);
            tcu.cuDevicePrimaryCtxRetain(&c1, d1);
            tcu.cuCtxSetCurrent(c1);
            tcu.cuMemAlloc(&peer, 1 << 20);
            tcu.cuCtxSetCurrent(ctx);
        }
        p2pt_finalize(h);
    }
    CUstream s;
    tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    const char *names[2] = {"ce", "tma"};
    printf("# host time of one 4 KiB p2pt_copy_async (us), median of %d batches of %d, "
           "validation on/off alternating in one process\n",
           BATCHES, CALLS);
    printf("%-6s %-5s %10s %10s %10s\n", "path", "tr", "validate=1", "validate=0", "cost");
    for (int path = 0; path < (peer ? 2 : 1); path++) {
        CUdeviceptr d = path ? peer : dst;
        for (int t = 0; t < 2; t++) {
            p2pt_handle *h[2] = {make(names[t], 1), make(names[t], 0)};
            double v[2];
            alternate(h, d, src, s, v);
            double on = v[0], off = v[1];
            printf("%-6s %-5s %10.3f %10.3f %10.3f\n", path ? "push" : "local", names[t], on, off,
                   on - off);
            p2pt_finalize(h[0]);
            p2pt_finalize(h[1]);
        }
    }

    printf("\n# auto's decision: host time of one 4 KiB local p2pt_copy_async (us) through "
           "auto and through the engine it picks, median of %d batches of %d, alternating\n",
           BATCHES, CALLS);
    printf("# and the router alone on one resolved request (ns per call, median of %d batches "
           "of %d)\n",
           BATCHES, ROUTES);
    printf("%-9s %-5s %10s %10s %10s %9s %9s %9s\n", "table", "picks", "auto", "fixed", "cost",
           "route_a", "route_f", "cost_ns");
    auto_cost("", dst, src, s);
    char path[] = "/tmp/p2pt-auto-ce-XXXXXX";
    int fd = mkstemp(path);
    int cc_major = 0, cc_minor = 0;
    tcu.cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    tcu.cuDeviceGetAttribute(&cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    char text[256];
    int n = snprintf(text, sizeof(text),
                     "p2pt-auto 1\narch sm_%d%d\ncopy local 0 ce\ncopy push 0 ce\n"
                     "copy pull 0 ce\nbatch 0 ce\n",
                     cc_major, cc_minor);
    if (fd < 0 || write(fd, text, (size_t)n) != n || close(fd) != 0) {
        fprintf(stderr, "p2pt-validate-cost: cannot write %s\n", path);
        return 1;
    }
    auto_cost(path, dst, src, s);
    unlink(path);
    return 0;
}
