/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cold mode: the first TMA copy of a fresh process, NVRTC compile (or
 * cubin-cache read) and module load included. Only a new process is cold,
 * so this program runs itself again (hidden flag --cold-child) and reads
 * the child's numbers: COLD_RUNS with the cubin cache off, then COLD_RUNS
 * with a private cache that an earlier child filled.
 *
 * The cache directory reaches the child as its p2pt_init_args.options (a
 * command-line argument), not through the environment: the parent's
 * environment stays as the user set it.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define COLD_RUNS 3
#define COLD_BYTES (1 * MiB)

/*
 * The child: `--cold-child DEVICE OPTIONS`. The context and buffers are made
 * first, untimed (they are not p2pt's cost); then p2pt_init, and the first
 * p2pt_prepare + copy + cuStreamSynchronize, then a second copy. Prints
 * "cold INIT PREPARE FIRST SECOND" in milliseconds, then p2pt's counts of
 * NVRTC compilations and cubin-cache hits.
 */
int bench_cold_child(int argc, char **argv)
{
    struct bench_gpu g;
    CUdeviceptr src = 0, dst = 0;
    CUstream s = NULL;
    p2pt_handle *h = NULL;
    unsigned char *host = NULL;
    int rc = 1;
    memset(&g, 0, sizeof(g));
    if (argc != 4) {
        bench_set_err("usage: --cold-child DEVICE OPTIONS");
        goto fail;
    }
    int device = atoi(argv[2]);
    p2pt_status ls = p2pt_test_driver_load(getenv("P2P_CUDA_LIBRARY"));
    if (ls != P2PT_SUCCESS) {
        bench_set_err("no CUDA device: %s", p2pt_last_error(NULL));
        goto fail;
    }
    if (!bench_gpu_info(&g, device) || !bench_gpu_open(&g) || !bench_use(&g))
        goto fail;
    CU(tcu.cuMemAlloc(&src, COLD_BYTES));
    CU(tcu.cuMemAlloc(&dst, COLD_BYTES));
    CU(tcu.cuMemsetD8(src, 0x5A, COLD_BYTES));
    CU(tcu.cuMemsetD8(dst, 0, COLD_BYTES));
    CU(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(tcu.cuCtxSynchronize());

    p2pt_init_args args;
    memset(&args, 0, sizeof(args));
    args.size = sizeof(args);
    args.transport = "tma";
    args.options = argv[3];
    double t0 = bench_now_us();
    P2(p2pt_init(&args, &h));
    double t1 = bench_now_us();
    P2(p2pt_prepare(h, device));
    double t2 = bench_now_us();
    P2(p2pt_copy_async(h, bench_dptr(dst), bench_dptr(src), COLD_BYTES, s));
    CU(tcu.cuStreamSynchronize(s));
    double t3 = bench_now_us();
    P2(p2pt_copy_async(h, bench_dptr(dst), bench_dptr(src), COLD_BYTES, s));
    CU(tcu.cuStreamSynchronize(s));
    double t4 = bench_now_us();

    host = malloc(COLD_BYTES);
    if (host == NULL) {
        bench_set_err("out of host memory");
        goto fail;
    }
    CU(tcu.cuMemcpyDtoH(host, dst, COLD_BYTES));
    for (size_t i = 0; i < COLD_BYTES; i++)
        if (host[i] != 0x5A) {
            bench_set_err("the first copies are wrong: byte %zu is 0x%02x, not 0x5a", i,
                          host[i]);
            goto fail;
        }
    p2pt_properties props = {sizeof(props)};
    P2(p2pt_get_properties(h, &props));
    printf("cold %.3f %.3f %.3f %.3f %llu %llu\n", (t1 - t0) / 1e3, (t2 - t1) / 1e3,
           (t3 - t1) / 1e3, (t4 - t3) / 1e3, (unsigned long long)props.compilations,
           (unsigned long long)props.cubin_cache_hits);
    rc = 0;
fail:
    if (rc != 0)
        fprintf(stderr, "p2pt-bench --cold-child: %s\n", bench_err);
    free(host);
    if (h)
        p2pt_finalize(h);
    if (g.ctx) {
        CU_RELEASE(tcu.cuCtxSetCurrent(g.ctx));
        if (s)
            CU_RELEASE(tcu.cuStreamDestroy(s));
        if (src)
            CU_RELEASE(tcu.cuMemFree(src));
        if (dst)
            CU_RELEASE(tcu.cuMemFree(dst));
        bench_gpu_close(&g);
    }
    fflush(stdout);
    return rc != 0 || bench_failures ? 1 : 0;
}

/* Starts this program as a cold child with p2pt options `options`; returns
 * its pid and the read end of its stdout, or -1 (bench_err). */
static pid_t spawn_child(const char *options, int *out_fd)
{
    char self[PATH_MAX], dev[16];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        snprintf(self, sizeof(self), "/proc/self/exe");
    else
        self[len] = '\0';
    snprintf(dev, sizeof(dev), "%d", bench_gpus[0].ordinal);
    int fd[2];
    if (pipe(fd) != 0) {
        bench_set_err("pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL); /* nothing buffered may be written twice */
    pid_t pid = fork();
    if (pid < 0) {
        bench_set_err("fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        char *args[] = {self, "--cold-child", dev, (char *)options, NULL};
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        execv(self, args);
        fprintf(stderr, "p2pt-bench: cannot run %s: %s\n", self, strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    *out_fd = fd[0];
    return pid;
}

/* Runs a cold child with the cubin cache in `cache_dir` and reads its
 * numbers: four times in ms, then compilations and cache hits. */
static bool cold_once(const char *cache_dir, double ms[6])
{
    int fd;
    char options[128];
    snprintf(options, sizeof(options), "P2P_TRANSPORT_CACHE_DIR=%s", cache_dir);
    pid_t pid = spawn_child(options, &fd);
    if (pid < 0)
        return false;
    char buf[512];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf + got, sizeof(buf) - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got == sizeof(buf) - 1)
            break;
    }
    buf[got] = '\0';
    close(fd);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            bench_set_err("waitpid: %s", strerror(errno));
            return false;
        }
    if (WIFSIGNALED(status)) {
        bench_set_err("the child was killed by signal %d", WTERMSIG(status));
        return false;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        bench_set_err("the child exited with status %d (its message is above)",
                      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return false;
    }
    const char *line = strstr(buf, "cold ");
    if (line == NULL || sscanf(line, "cold %lf %lf %lf %lf %lf %lf", &ms[0], &ms[1], &ms[2],
                               &ms[3], &ms[4], &ms[5]) != 6) {
        bench_one_line(buf);
        bench_set_err("unexpected output from the child: \"%.200s\"", buf);
        return false;
    }
    return true;
}

/* NULL, or why the page cache could not be dropped. */
static const char *drop_page_cache(void)
{
    static char why[128];
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (f == NULL || fputs("3\n", f) < 0 || fclose(f) != 0) {
        snprintf(why, sizeof(why), "%s", strerror(errno));
        if (f != NULL)
            fclose(f);
        return why;
    }
    return NULL;
}

/* COLD_RUNS cold children with the cubin cache in `cache_dir` ("off": NVRTC
 * every time). `prefix` names the CSV kinds; `want_hits`: every run must
 * have read the cubin from the cache (else it must have compiled). */
static void cold_series(const char *cache_dir, const char *prefix, bool want_hits, bool *drop)
{
    double first[COLD_RUNS];
    int ok = 0;
    for (int r = 0; r < COLD_RUNS; r++) {
        double ms[6];
        if (*drop) {
            const char *why = drop_page_cache();
            if (why != NULL) {
                printf("# --cold-drop-caches: cannot drop the page cache (%s; needs root): "
                       "the runs below use a warm page cache\n", why);
                *drop = false;
            }
        }
        if (!cold_once(cache_dir, ms)) {
            printf("%5d failed: %s\n", r + 1, bench_err);
            bench_failures++;
            continue;
        }
        bool as_expected = want_hits ? (ms[4] == 0 && ms[5] == 1) : (ms[4] == 1 && ms[5] == 0);
        printf("%5d %10.3f %11.3f %10.3f %10.3f %8.0f %6.0f%s\n", r + 1, ms[0], ms[1], ms[2],
               ms[3], ms[4], ms[5], as_expected ? "" : "  <- unexpected: not counted");
        if (!as_expected) {
            bench_failures++;
            continue;
        }
        static const char *const kind[4] = {"init", "prepare", "first", "second"};
        for (int k = 0; k < 4; k++) {
            char name[32];
            snprintf(name, sizeof(name), "%s%s", prefix, kind[k]);
            bench_emit("cold", "local", T_TMA, &bench_default_cfg, COLD_BYTES, ms[k] * 1e3, 0,
                       name);
        }
        first[ok++] = ms[2];
    }
    fflush(stdout);
    if (ok > 0) {
        char name[32];
        double m = bench_median(first, ok);
        printf("# first copy (prepare + copy + sync), median of %d: %.3f ms\n", ok, m);
        snprintf(name, sizeof(name), "%sfirst_median", prefix);
        bench_emit("cold", "local", T_TMA, &bench_default_cfg, COLD_BYTES, m * 1e3, 0, name);
    }
}

void bench_run_cold(void)
{
    char sz[32], dir[64];
    bool drop = bench_opt.drop_caches;
    printf("\n# cold, GPU %d: a fresh process (this program re-run) makes its first TMA copy "
           "of %s; host clock, milliseconds: init = p2pt_init; first = p2pt_prepare (NVRTC "
           "compile or cubin-cache read, + module load) + copy + cuStreamSynchronize; second = "
           "the next copy + sync; compiles and hits = p2pt's counters; page cache %s\n",
           bench_gpus[0].ordinal, bench_fmt_size(COLD_BYTES, sz, sizeof(sz)),
           drop ? "dropped before each run" : "as it is (warm after the first run)");
    printf("#%4s %10s %11s %10s %10s %8s %6s\n", "run", "init_ms", "prepare_ms", "first_ms",
           "second_ms", "compiles", "hits");
    printf("# cubin cache off (P2P_TRANSPORT_CACHE_DIR=off): NVRTC compiles\n");
    cold_series("off", "", false, &drop);

    /* mkdtemp's name has no space or comma, which would cut an options item. */
    snprintf(dir, sizeof(dir), "/tmp/p2pt-bench-cache-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        printf("# cubin cache: cannot make a private directory: %s\n", strerror(errno));
        bench_failures++;
        return;
    }
    /* An earlier process fills the cache (it compiles and saves). */
    double ms[6];
    if (!cold_once(dir, ms) || ms[4] != 1) {
        printf("# cubin cache: the run that fills %s failed: %s\n", dir, bench_err);
        bench_failures++;
    } else {
        printf("# cubin cache in %s, filled by one earlier run (%.3f ms)\n", dir, ms[2]);
        cold_series(dir, "cached_", true, &drop);
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", dir);
}
