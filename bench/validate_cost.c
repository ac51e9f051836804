/*
 * p2pt-validate-cost: what P2P_TRANSPORT_VALIDATE=1 costs the caller per copy.
 *
 * Host time of one p2pt_copy_async call (4 KiB, local, and peer when a second
 * GPU is there), validation on vs off, for both transports, measured in ONE
 * process with the two settings alternating batch by batch, so clock and
 * load drift hit both alike (separate runs differed by more than the effect).
 * Median over 31 batches of 1000 calls; the stream is drained between batches.
 * Each handle gets its setting through p2pt_init_args.options, so the two
 * live side by side without touching the process environment.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_time.h"
#include "p2pt_internal.h"
#include "test_driver.h"

#define BATCHES 31
#define CALLS 1000

static p2pt_handle *make(const char *transport, int validate)
{
    char options[64];
    snprintf(options, sizeof(options), "P2P_TRANSPORT_VALIDATE=%d", validate);
    p2pt_init_args a = {sizeof(a), NULL, transport, options};
    p2pt_handle *h = NULL;
    if (p2pt_init(&a, &h) != P2PT_SUCCESS || p2pt_prepare(h, 0) != P2PT_SUCCESS) {
        fprintf(stderr, "p2pt-validate-cost: %s\n", p2pt_last_error(NULL));
        exit(1);
    }
    return h;
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
            double v[2][BATCHES];
            for (int b = 0; b < BATCHES; b++) {
                for (int k = 0; k < 2; k++) {
                    int which = (b % 2) ? 1 - k : k; /* alternate who goes first */
                    double t0 = bench_now_us();
                    for (int i = 0; i < CALLS; i++)
                        if (p2pt_copy_async(h[which], (void *)d, (void *)src, 4096, s)) {
                            fprintf(stderr, "copy: %s\n", p2pt_last_error(NULL));
                            return 1;
                        }
                    v[which][b] = (bench_now_us() - t0) / CALLS;
                    tcu.cuStreamSynchronize(s);
                }
            }
            double on = bench_median(v[0], BATCHES), off = bench_median(v[1], BATCHES);
            printf("%-6s %-5s %10.3f %10.3f %10.3f\n", path ? "push" : "local", names[t], on, off,
                   on - off);
            p2pt_finalize(h[0]);
            p2pt_finalize(h[1]);
        }
    }
    return 0;
}
