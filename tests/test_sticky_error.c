/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sticky errors: when another kernel of the process faults (here an
 * out-of-bounds write at address 0x10, loaded from PTX through the driver
 * API, as a framework's kernel might), the context is unusable; p2pt's next
 * copy returns status 1 naming the driver error and saying the context is
 * unusable, without hanging and without reporting success. Each transport
 * runs in a child process of its own, which is the only process that ever
 * touches CUDA, so the fault poisons nothing else.
 */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu_test.h"

#define SKIP_CODE 77

static const char fault_ptx[] = ".version 7.0\n"
                                ".target sm_50\n"
                                ".address_size 64\n"
                                ".visible .entry p2pt_test_fault()\n"
                                "{\n"
                                "  .reg .b64 %rd<2>;\n"
                                "  .reg .b32 %r<2>;\n"
                                "  mov.u64 %rd1, 16;\n"
                                "  mov.u32 %r1, 1;\n"
                                "  st.global.u32 [%rd1], %r1;\n"
                                "  ret;\n"
                                "}\n";

/* The child: fault a kernel, then copy through p2pt; writes "<status>\n<text>"
 * (or the reason to skip, with SKIP_CODE) to `fd`. */
static int child(int fd, const char *transport)
{
    FILE *out = fdopen(fd, "w");
    setvbuf(out, NULL, _IONBF, 0); /* the child leaves with _exit */
    const char *lib = getenv("P2P_CUDA_LIBRARY");
    int count = 0;
    if (p2pt_test_driver_load(lib ? lib : "libcuda.so.1") != P2PT_SUCCESS) {
        fprintf(out, "no CUDA device: %s", p2pt__last_error_text());
        return SKIP_CODE;
    }
    if (tcu.cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1) {
        fprintf(out, "no CUDA device: the driver sees none");
        return SKIP_CODE;
    }
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr src, dst;
    CUstream s;
    CUmodule mod;
    CUfunction fn;
    size_t n = 1 << 20;
    if (tcu.cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        tcu.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        tcu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS || tcu.cuMemAlloc(&src, n) != CUDA_SUCCESS ||
        tcu.cuMemAlloc(&dst, n) != CUDA_SUCCESS ||
        tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        tcu.cuModuleLoadData(&mod, fault_ptx) != CUDA_SUCCESS ||
        tcu.cuModuleGetFunction(&fn, mod, "p2pt_test_fault") != CUDA_SUCCESS) {
        fprintf(out, "setup failed");
        return 3;
    }
    p2pt_init_args a = {sizeof(a), NULL, transport};
    p2pt_handle *h = NULL;
    if (p2pt_init(&a, &h) != P2PT_SUCCESS || p2pt_prepare(h, 0) != P2PT_SUCCESS) {
        fprintf(out, "init or prepare failed: %s", p2pt_last_error(NULL));
        return 3;
    }
    if (tcu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) != CUDA_SUCCESS) {
        fprintf(out, "launching the faulting kernel failed");
        return 3;
    }
    CUresult sync = tcu.cuStreamSynchronize(s);
    p2pt_status st = p2pt_copy_async(h, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src,
                                     n, s);
    fprintf(out, "%d\n%s (stream sync: %s)", (int)st, p2pt_last_error(NULL),
            p2pt__cuda_error_name(sync));
    fclose(out);
    return 0;
}

static void sticky_error_is_reported(const char *transport)
{
    GT_SKIP_NO_GPU_ASKED();
    setenv("P2P_TRANSPORT_CACHE_DIR", "off", 1);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(fds[0]);
        _exit(child(fds[1], transport));
    }
    close(fds[1]);
    int ws = 0;
    pid_t got = 0;
    for (int ms = 0; ms < 120000 && (got = waitpid(pid, &ws, WNOHANG)) == 0; ms += 10)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &ws, 0);
        cr_assert_fail("%s: no answer within 120 s after a kernel faulted (a hang)", transport);
    }
    char buf[4096] = "";
    FILE *in = fdopen(fds[0], "r");
    size_t len = fread(buf, 1, sizeof(buf) - 1, in);
    buf[len] = '\0';
    fclose(in);
    cr_assert(WIFEXITED(ws), "%s: the child ended with signal %d", transport, WTERMSIG(ws));
    if (WEXITSTATUS(ws) == SKIP_CODE)
        cr_skip_test("%s", buf);
    cr_assert_eq(WEXITSTATUS(ws), 0, "%s: %s", transport, buf);
    int status = atoi(buf);
    cr_expect_eq(status, P2PT_CUDA_ERROR, "%s: copy after a fault returned %d: %s", transport,
                 status, buf);
    cr_expect(strstr(buf, "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL ||
                  strstr(buf, "CUDA_ERROR_LAUNCH_FAILED") != NULL,
              "%s: the text does not name the sticky error: %s", transport, buf);
    cr_expect(strstr(buf, "unusable") != NULL,
              "%s: the text does not say the context is unusable: %s", transport, buf);
}

Test(sticky_error, copy_after_a_faulted_kernel_reports_it_ce, .timeout = 150)
{
    sticky_error_is_reported("ce");
}

Test(sticky_error, copy_after_a_faulted_kernel_reports_it_tma, .timeout = 150)
{
    sticky_error_is_reported("tma");
}

Test(sticky_error, copy_after_a_faulted_kernel_reports_it_auto, .timeout = 150)
{
    sticky_error_is_reported("auto");
}
