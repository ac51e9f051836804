/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every failure point, tried: runs the workload (workload.c) once to learn
 * what it calls (the census) and what each call returns (the baseline), then
 * again in a fresh process for each injection point: each driver and NVRTC
 * entry failing at its first, middle and last call, and each cubin-cache
 * fault (read-only, unreadable or missing directory, a file in its place, a
 * full disk, truncated, corrupted and wrong-architecture cubins, garbage from
 * NVRTC, no NVRTC). Each run must exit normally in time with every call
 * reporting a status; the first call that differs from the baseline must name
 * the failed entry (or file); a failed call must say why; p2pt must leave
 * the thread's current context as it found it; after the one-shot fault the
 * same handles must work again (or, where the failure is kept for the process
 * by design, say why); and sanitizers must report nothing. Prints one line
 * per failure and a summary; exits 1 on any failure.
 *
 *   p2pt-fault-loop WORKLOAD CUDA_LIBRARY NVRTC_LIBRARY [jobs]
 *
 * CUDA_LIBRARY is the fake driver (libp2pt_fake_cuda.so) or, on a GPU, the
 * shim over the real one (libp2pt_fault_cuda.so, with P2PT_FAULT_GPU=1;
 * tests/fault/run-gpu.sh). P2PT_FAULT_DIR=dir keeps the runs' logs there,
 * P2PT_FAULT_KEEP=1 keeps them after a clean pass.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CALLS 512
#define MAX_POINTS 1024
#define TIMEOUT_S 60

struct call {
    char step[96];
    int status;
    int ctx_kept;
    char text[2048];
};

struct run {
    int n;
    bool ended;
    struct call c[MAX_CALLS];
};

enum cache_setup {
    CACHE_FRESH,      /* an empty, missing directory */
    CACHE_SEEDED,     /* a copy of a complete cache */
    CACHE_READ_ONLY,  /* mode 0500 */
    CACHE_UNREADABLE, /* mode 0000 */
    CACHE_IS_FILE,    /* a file where the directory should be */
    CACHE_FULL_DISK,  /* RLIMIT_FSIZE below a cubin's size */
    CACHE_TRUNCATED,  /* seeded, each cubin cut to half */
    CACHE_CORRUPTED,  /* seeded, bytes inside each cubin changed */
    CACHE_WRONG_ARCH, /* seeded, each cubin built for sm_80 */
    CACHE_DIR_AS_CUBIN,  /* a directory where each cubin should be */
    CACHE_LINK_AS_CUBIN, /* a symbolic link where each cubin should be */
};

/* Runs of the workload that reach entries the default one does not: an
 * older driver (only CUDA 12.8's batched copy) with plain launches. */
static const struct variant {
    const char *name;
    const char *env[2][2];
} variants[] = {
    {"default", {{NULL, NULL}}},
    {"CUDA 12.8 driver, P2P_TRANSPORT_PDL=0",
     {{"P2PT_FAKE_DRIVER_VERSION", "12080"}, {"P2P_TRANSPORT_PDL", "0"}}},
};
#define N_VARIANTS ((int)(sizeof(variants) / sizeof(variants[0])))

struct point {
    int variant;
    char label[160];
    char fault[160];     /* P2PT_FAULT */
    char entry[64];      /* what the failing call's text must name */
    bool kept_by_design; /* a failure p2pt keeps for the process */
    enum cache_setup cache;
    const char *nvrtc_output;
    bool no_nvrtc;
    pid_t pid;
    double started;
    int wstatus;
    bool timed_out;
    bool done;
    char dir[512];
};

static const char *workload, *fake_cuda, *fake_nvrtc, *root;
static struct point points[MAX_POINTS];
static int n_points;
static struct run baselines[N_VARIANTS];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int sh(const char *fmt, const char *a, const char *b)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), fmt, a, b);
    return system(cmd);
}

static bool parse_run(const char *path, struct run *r)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    char *line = NULL;
    size_t cap = 0;
    memset(r, 0, sizeof(*r));
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "END ", 4) == 0) {
            r->ended = true;
            continue;
        }
        struct call *c = &r->c[r->n];
        int used = 0;
        if (r->n == MAX_CALLS ||
            sscanf(line, "CALL %95s %d %d%n", c->step, &c->status, &c->ctx_kept, &used) != 3)
            continue;
        snprintf(c->text, sizeof(c->text), "%s", line[used] == ' ' ? line + used + 1 : "");
        r->n++;
    }
    free(line);
    fclose(f);
    return true;
}

/* A cache path inside the run's directory, set up as `p->cache` says. */
static void setup_cache(struct point *p, char *cache, size_t len)
{
    snprintf(cache, len, "%s/cache", p->dir);
    switch (p->cache) {
    case CACHE_FRESH:
    case CACHE_FULL_DISK:
        break;
    case CACHE_READ_ONLY:
    case CACHE_UNREADABLE:
        mkdir(cache, 0700);
        chmod(cache, p->cache == CACHE_READ_ONLY ? 0500 : 0000);
        break;
    case CACHE_IS_FILE: {
        int fd = open(cache, O_WRONLY | O_CREAT, 0600);
        if (fd >= 0)
            close(fd);
        break;
    }
    case CACHE_DIR_AS_CUBIN:
    case CACHE_LINK_AS_CUBIN:
        mkdir(cache, 0700);
        if (p->cache == CACHE_DIR_AS_CUBIN)
            sh("for f in '%s'/seed/cache/*.cubin; do mkdir \"%s/${f##*/}\"; done", root, cache);
        else
            sh("for f in '%s'/seed/cache/*.cubin; do ln -s \"$f\" \"%s/${f##*/}\"; done", root,
               cache);
        break;
    case CACHE_SEEDED:
    case CACHE_TRUNCATED:
    case CACHE_CORRUPTED:
    case CACHE_WRONG_ARCH:
        sh("cp -r '%s/seed/cache' '%s'", root, p->dir);
        if (p->cache == CACHE_TRUNCATED)
            sh("for f in '%s'/*.cubin; do truncate -s 100 \"$f\"; done%s", cache, "");
        else if (p->cache == CACHE_CORRUPTED)
            sh("for f in '%s'/*.cubin; do printf 'XXXXXXXX' | dd of=\"$f\" bs=1 seek=80 "
               "conv=notrunc 2>/dev/null; done%s", cache, "");
        else if (p->cache == CACHE_WRONG_ARCH)
            sh("for f in '%s'/*.cubin; do printf 'P' | dd of=\"$f\" bs=1 seek=48 "
               "conv=notrunc 2>/dev/null; done%s", cache, "");
        break;
    }
}

static void start(struct point *p)
{
    snprintf(p->dir, sizeof(p->dir), "%s/p%d", root, (int)(p - points));
    mkdir(p->dir, 0700);
    char cache[600], out[600], err[600];
    setup_cache(p, cache, sizeof(cache));
    snprintf(out, sizeof(out), "%s/stdout", p->dir);
    snprintf(err, sizeof(err), "%s/stderr", p->dir);
    p->started = now();
    p->pid = fork();
    if (p->pid != 0)
        return;
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0)
        _exit(3);
    dup2(o, 1);
    dup2(e, 2);
    setenv("P2P_CUDA_LIBRARY", fake_cuda, 1);
    setenv("P2P_NVRTC_LIBRARY", p->no_nvrtc ? "/nonexistent/libnvrtc.so" : fake_nvrtc, 1);
    setenv("P2P_TRANSPORT_CACHE_DIR", cache, 1);
    setenv("P2PT_FAULT", p->fault, 1);
    if (p->nvrtc_output != NULL)
        setenv("P2PT_FAKE_NVRTC_OUTPUT", p->nvrtc_output, 1);
    for (int i = 0; i < 2; i++)
        if (variants[p->variant].env[i][0] != NULL)
            setenv(variants[p->variant].env[i][0], variants[p->variant].env[i][1], 1);
    if (strcmp(p->label, "census") == 0) {
        char census[600];
        snprintf(census, sizeof(census), "%s/census", p->dir);
        setenv("P2PT_FAULT_CENSUS", census, 1);
    }
    if (p->cache == CACHE_FULL_DISK)
        setenv("P2PT_WORKLOAD_FSIZE", "1024", 1);
    execl(workload, workload, (char *)NULL);
    _exit(127);
}

static void wait_all(int from, int to, int jobs)
{
    int next = from, running = 0;
    while (next < to || running > 0) {
        while (running < jobs && next < to) {
            if (points[next].done) {
                next++;
                continue;
            }
            start(&points[next++]);
            running++;
        }
        int ws;
        pid_t pid = waitpid(-1, &ws, WNOHANG);
        if (pid > 0) {
            for (int i = from; i < to; i++)
                if (points[i].pid == pid) {
                    points[i].wstatus = ws;
                    points[i].pid = 0;
                    points[i].done = true;
                }
            running--;
            continue;
        }
        double t = now();
        for (int i = from; i < next; i++)
            if (points[i].pid > 0 && !points[i].timed_out && t - points[i].started > TIMEOUT_S) {
                points[i].timed_out = true;
                kill(points[i].pid, SIGKILL);
            }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}

static bool file_has(const char *path, const char *needle)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "grep -q -e '%s' '%s' 2>/dev/null", needle, path);
    return system(cmd) == 0;
}

static int crashes, hangs, leaks, sanitizer_reports, failures;

static void fail(const struct point *p, const char *fmt, const char *a, const char *b)
{
    printf("FAIL %s: ", p->label);
    printf(fmt, a, b);
    printf(" (log: %s)\n", p->dir);
    failures++;
}

/* Every cubin in the run's cache is a whole one the fake driver takes: the
 * damaged ones were compiled again and replaced. */
static void check_cache_replaced(const struct point *p)
{
    char cmd[1400];
    snprintf(cmd, sizeof(cmd),
             "n=0; for f in '%s/cache'/*.cubin; do cmp -s \"$f\" '%s/seed/cache/'\"$(basename "
             "\"$f\")\" || exit 1; n=$((n+1)); done; [ $n -gt 0 ]",
             p->dir, root);
    if (system(cmd) != 0)
        fail(p, "the damaged cubins in %s/cache were not all replaced by whole ones%s", p->dir,
             "");
}

static size_t pass_len(const char *step)
{
    const char *slash = strchr(step, '/');
    return slash != NULL ? (size_t)(slash - step) : strlen(step);
}

static bool same_pass(const char *a, const char *b)
{
    return pass_len(a) == pass_len(b) && strncmp(a, b, pass_len(a)) == 0;
}

/* Whether the init of the handle that `step` uses failed in `r`. */
static bool init_failed(const struct run *r, const char *step)
{
    const char *t = strncmp(step, "again-", 6) == 0     ? step + 6
                    : strncmp(step, "capture-", 8) == 0 ? step + 8
                                                        : step;
    size_t n = pass_len(t);
    for (int i = 0; i < r->n; i++)
        if (strncmp(r->c[i].step, t, n) == 0 && strcmp(r->c[i].step + n, "/init") == 0)
            return r->c[i].status != 0;
    return false;
}

static void check(struct point *p)
{
    char out[600], err[600];
    snprintf(out, sizeof(out), "%s/stdout", p->dir);
    snprintf(err, sizeof(err), "%s/stderr", p->dir);
    if (p->timed_out) {
        hangs++;
        char secs[16];
        snprintf(secs, sizeof(secs), "%d", TIMEOUT_S);
        fail(p, "no exit within %s seconds%s", secs, "");
        return;
    }
    if (file_has(err, "LeakSanitizer")) {
        leaks++;
        fail(p, "LeakSanitizer reported a leak%s%s", "", "");
        return;
    }
    if (file_has(err, "Sanitizer") || file_has(err, "runtime error:")) {
        sanitizer_reports++;
        fail(p, "a sanitizer reported an error%s%s", "", "");
        return;
    }
    if (WIFSIGNALED(p->wstatus) || !WIFEXITED(p->wstatus) || WEXITSTATUS(p->wstatus) != 0) {
        crashes++;
        char why[64];
        snprintf(why, sizeof(why), "%s %d", WIFSIGNALED(p->wstatus) ? "signal" : "exit status",
                 WIFSIGNALED(p->wstatus) ? WTERMSIG(p->wstatus) : WEXITSTATUS(p->wstatus));
        fail(p, "the workload ended with %s%s", why, "");
        return;
    }
    static struct run r;
    const struct run *bl = &baselines[p->variant];
    if (!parse_run(out, &r) || !r.ended || r.n != bl->n) {
        crashes++;
        fail(p, "the workload did not report every call%s%s", "", "");
        return;
    }
    /* The pass of a call: "ce", "again-tma", ...; finalize is the last. */
    int first = -1;
    for (int i = 0; i < r.n && first < 0; i++)
        if (r.c[i].status != bl->c[i].status)
            first = i;
    for (int i = 0; i < r.n; i++) {
        const struct call *c = &r.c[i], *base = &bl->c[i];
        if (strcmp(c->step, base->step) != 0) {
            fail(p, "call %s out of order (baseline: %s)", c->step, base->step);
            return;
        }
        if (c->status != 0 && c->text[0] == '\0')
            fail(p, "%s failed with no text%s", c->step, "");
        /* A failed pop or restore is the one step that cannot put the
         * context back; the restore says so in its status, the pop cannot
         * (p2pt__ctx_leave has no status to give). */
        if (!c->ctx_kept && strstr(p->fault, "cuCtxPopCurrent") == NULL &&
            strstr(c->text, "cuCtxSetCurrent(saved)") == NULL)
            fail(p, "%s left the thread's current context changed: %s", c->step, c->text);
        if (i == first && p->entry[0] != '\0' && strstr(c->text, p->entry) == NULL)
            fail(p, "the first failed call's text does not name the failed entry: %s", c->text,
                 "");
        /* A kernel fault's error is sticky: the text must say the context
         * is unusable. */
        if (i == first && (strstr(p->fault, ":700") != NULL || strstr(p->fault, ":719") != NULL) &&
            strstr(c->text, "unusable") == NULL)
            fail(p, "a sticky error's text does not say the context is unusable: %s", c->text,
                 "");
        /* Recovery: every pass after the one that met the fault runs as in
         * the baseline, on every handle that exists (a failed init leaves
         * its transport's calls refusing a NULL handle). */
        if (first < 0 || i <= first || p->kept_by_design || c->status == base->status ||
            same_pass(c->step, r.c[first].step) || init_failed(&r, c->step))
            continue;
        fail(p, "after the fault cleared %s still fails: %s", c->step, c->text);
    }
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "ls -a '%s/cache' 2>/dev/null | grep -q '\\.tmp\\.'", p->dir);
    if (system(cmd) == 0)
        fail(p, "a temporary cubin was left in %s/cache%s", p->dir, "");
    if ((p->cache == CACHE_TRUNCATED || p->cache == CACHE_CORRUPTED ||
         p->cache == CACHE_WRONG_ARCH) &&
        p->fault[0] == '\0')
        check_cache_replaced(p);
}

static int adding_variant;

static void add(const char *label, const char *fault, const char *entry, bool kept,
                enum cache_setup cache)
{
    if (n_points == MAX_POINTS)
        return;
    struct point *p = &points[n_points++];
    memset(p, 0, sizeof(*p));
    p->variant = adding_variant;
    snprintf(p->label, sizeof(p->label), "%s", label);
    snprintf(p->fault, sizeof(p->fault), "%s", fault);
    snprintf(p->entry, sizeof(p->entry), "%s", entry);
    p->kept_by_design = kept;
    p->cache = cache;
}

/* The codes each entry is failed with: out of memory everywhere, and the
 * failures each entry meets in practice. */
static void add_entry_points(const char *lib, const char *entry, unsigned long calls)
{
    static const struct {
        const char *entry;
        int code;
    } extra[] = {
        {"cuModuleLoadData", 200},      /* CUDA_ERROR_INVALID_IMAGE */
        {"cuLaunchKernel", 719},        /* CUDA_ERROR_LAUNCH_FAILED */
        {"cuLaunchKernelEx", 700},      /* CUDA_ERROR_ILLEGAL_ADDRESS */
        {"cuMemcpyAsync", 700},
        {"cuCtxEnablePeerAccess", 217}, /* CUDA_ERROR_PEER_ACCESS_UNSUPPORTED */
        {"nvrtcCompileProgram", 6},     /* NVRTC_ERROR_COMPILATION */
        {"nvrtcCompileProgram", 5},     /* NVRTC_ERROR_INVALID_OPTION */
    };
    bool nvrtc = strcmp(lib, "nvrtc") == 0;
    /* Kept for the process by design: the driver is loaded once (a failed
     * load is every later init's answer), and so is NVRTC; a compile error
     * is the source's, so it is the answer for that kernel from then on. */
    bool kept = strcmp(entry, "cuInit") == 0 || strcmp(entry, "cuGetProcAddress_v2") == 0 ||
                strcmp(entry, "nvrtcVersion") == 0;
    unsigned long nth[3] = {1, (calls + 1) / 2, calls};
    for (int k = 0; k < 3; k++) {
        if (k > 0 && nth[k] == nth[k - 1])
            continue;
        if (k == 2 && nth[2] == nth[0])
            continue;
        int codes[4] = {nvrtc ? 1 : 2}, n_codes = 1;
        for (size_t e = 0; e < sizeof(extra) / sizeof(extra[0]); e++)
            if (strcmp(extra[e].entry, entry) == 0 && n_codes < 4)
                codes[n_codes++] = extra[e].code;
        for (int i = 0; i < n_codes; i++) {
            char label[160], fault[160];
            snprintf(fault, sizeof(fault), "%s:%lu:%d", entry, nth[k], codes[i]);
            snprintf(label, sizeof(label), "%s call %lu of %lu fails with %d", entry, nth[k],
                     calls, codes[i]);
            /* A compile error's text names the kernel file it failed on. */
            add(label, fault,
                strcmp(entry, "nvrtcCompileProgram") == 0 && codes[i] != 5
                    ? "NVRTC could not compile"
                    : entry,
                kept || (strcmp(entry, "nvrtcCompileProgram") == 0 && codes[i] == 6),
                CACHE_FRESH);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s WORKLOAD FAKE_CUDA FAKE_NVRTC [jobs]\n", argv[0]);
        return 2;
    }
    workload = argv[1];
    fake_cuda = argv[2];
    fake_nvrtc = argv[3];
    int jobs = argc > 4 ? atoi(argv[4]) : 2;
    if (jobs < 1)
        jobs = 1;
    if (getenv("ASAN_OPTIONS") == NULL)
        setenv("ASAN_OPTIONS", "detect_leaks=1", 1);
    unsetenv("P2P_TRANSPORT");
    unsetenv("P2PT_FAULT_CENSUS");
    char tmpl[] = "/tmp/p2pt-fault-XXXXXX";
    const char *tmpdir = getenv("P2PT_FAULT_DIR");
    static char dirbuf[512];
    if (tmpdir != NULL) {
        snprintf(dirbuf, sizeof(dirbuf), "%s", tmpdir);
        sh("rm -rf '%s' && mkdir -p '%s'", dirbuf, dirbuf);
        root = dirbuf;
    } else if ((root = mkdtemp(tmpl)) == NULL) {
        perror("mkdtemp");
        return 2;
    }

    /* The censuses, one per variant: also the baselines, and the first
     * one's cache is the seed of the cache scenarios. An entry a variant
     * reaches is tried in the first variant that reaches it. */
    char seen[4096] = " ";
    int entries = 0;
    for (int v = 0; v < N_VARIANTS; v++) {
        adding_variant = v;
        add("census", "", "", false, CACHE_FRESH);
        points[n_points - 1].variant = v;
        wait_all(n_points - 1, n_points, 1);
        struct point *c = &points[n_points - 1];
        char path[700];
        snprintf(path, sizeof(path), "%s/stdout", c->dir);
        if (!parse_run(path, &baselines[v]) || !baselines[v].ended || c->wstatus != 0) {
            printf("fault-injection: the census run (%s) failed (log: %s)\n", variants[v].name,
                   c->dir);
            sh("head -40 '%s/stderr'%s", c->dir, "");
            return 1;
        }
        for (int i = 0; i < baselines[v].n; i++)
            if (baselines[v].c[i].status != 0 && baselines[v].c[i].text[0] == '\0')
                printf("census: %s failed with no text\n", baselines[v].c[i].step);
        if (v == 0)
            sh("cd '%s/..' && mkdir -p seed && cp -r '%s/cache' seed/", c->dir, c->dir);
        snprintf(path, sizeof(path), "%s/census", c->dir);
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            printf("fault-injection: no census (log: %s)\n", c->dir);
            return 1;
        }
        char lib[32], entry[64], key[80];
        unsigned long calls;
        while (fscanf(f, "%31s %63s %lu", lib, entry, &calls) == 3) {
            snprintf(key, sizeof(key), " %s ", entry);
            if (strstr(seen, key) != NULL || strlen(seen) + strlen(key) >= sizeof(seen))
                continue;
            strcat(seen, entry);
            strcat(seen, " ");
            entries++;
            add_entry_points(lib, entry, calls);
        }
        fclose(f);
    }
    adding_variant = 0;
    /* Entries only a failure path calls, failing there too. */
    add("cuModuleGetFunction fails, then the cleanup's cuModuleUnload",
        "cuModuleGetFunction:1:2,cuModuleUnload:1:2", "cuModuleGetFunction", false, CACHE_FRESH);
    add("cuModuleGetFunction fails at its last call, then cuModuleUnload",
        "cuModuleGetFunction:14:2,cuModuleUnload:1:2", "cuModuleGetFunction", false, CACHE_FRESH);
    add("cuMemcpyAsync fails with an unknown code, then cuGetErrorName",
        "cuMemcpyAsync:1:999,cuGetErrorName:1:2", "cuMemcpyAsync", false, CACHE_FRESH);
    add("cuModuleLoadData fails, then cuGetErrorString",
        "cuModuleLoadData:1:2,cuGetErrorString:1:2", "cuModuleLoadData", false, CACHE_FRESH);
    add("cuLaunchKernelEx fails, then cuGetErrorString at its second call",
        "cuLaunchKernelEx:3:700,cuGetErrorString:2:2", "cuLaunchKernelEx", false, CACHE_FRESH);
    /* A stream whose last event could not be recorded is waited for as its
     * whole context: the third record is the ce pass's last mark before its
     * closes. */
    add("a mark's cuEventRecord fails, then the close's cuCtxSynchronize",
        "cuEventRecord:3:2,cuCtxSynchronize:1:2", "cuCtxSynchronize", false, CACHE_FRESH);
    add("a compile error, then nvrtcGetProgramLogSize",
        "nvrtcCompileProgram:1:6,nvrtcGetProgramLogSize:1:1", "NVRTC could not compile", true,
        CACHE_FRESH);
    add("a compile error, then nvrtcGetProgramLog",
        "nvrtcCompileProgram:2:6,nvrtcGetProgramLog:1:1", "NVRTC could not compile", true,
        CACHE_FRESH);
    add("cache seeded (read back, NVRTC never opened)", "", "", false, CACHE_SEEDED);
    add("cache directory read-only", "", "", false, CACHE_READ_ONLY);
    add("cache directory unreadable", "", "", false, CACHE_UNREADABLE);
    add("cache directory is a file", "", "", false, CACHE_IS_FILE);
    add("cache on a full disk", "", "", false, CACHE_FULL_DISK);
    add("cache holds directories in place of cubins", "", "", false, CACHE_DIR_AS_CUBIN);
    add("cache holds symbolic links in place of cubins", "", "", false, CACHE_LINK_AS_CUBIN);
    add("cache holds truncated cubins", "", "", false, CACHE_TRUNCATED);
    /* Damage only the fake driver is sure to see, and the fake NVRTC's
     * faults: not with the real driver and NVRTC (P2PT_FAULT_GPU=1). */
    const char *gpu = getenv("P2PT_FAULT_GPU");
    if (gpu == NULL || strcmp(gpu, "1") != 0) {
        add("cache holds corrupted cubins", "", "", false, CACHE_CORRUPTED);
        add("cache holds wrong-architecture cubins", "", "", false, CACHE_WRONG_ARCH);
        add("cache holds corrupted cubins, the recompile fails", "nvrtcCompileProgram:1:6",
            "NVRTC", true, CACHE_CORRUPTED);
        add("NVRTC hands out garbage", "", "cuModuleLoadData", true, CACHE_FRESH);
        points[n_points - 1].nvrtc_output = "garbage";
    }
    add("no NVRTC", "", "/nonexistent/libnvrtc.so", true, CACHE_FRESH);
    points[n_points - 1].no_nvrtc = true;
    if (geteuid() == 0)
        printf("fault-injection: running as root, whom a read-only or unreadable cache "
               "directory does not stop: those two points run, but do not deny access\n");
    double t0 = now();
    wait_all(0, n_points, jobs);
    for (int i = 0; i < n_points; i++)
        if (strcmp(points[i].label, "census") != 0)
            check(&points[i]);
    printf("fault-injection: %d driver and NVRTC entries in the census, %d calls per run, "
           "%.0f s\n",
           entries, baselines[0].n, now() - t0);
    printf("fault-injection: %d points, %d crashes, %d hangs, %d leaks, %d sanitizer reports, "
           "%d failed checks\n",
           n_points - N_VARIANTS, crashes, hangs, leaks, sanitizer_reports, failures);
    if (failures == 0 && getenv("P2PT_FAULT_KEEP") == NULL)
        sh("chmod -R u+rwx '%s' && rm -rf '%s'", root, root);
    return failures == 0 ? 0 : 1;
}
