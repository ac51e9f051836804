/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The on-disk cubin cache (src/jit/cubin_cache.c, used by src/jit/jit.c).
 *
 * CPU tests: the file name, the completeness check, the atomic write and the
 * read, and every way a file or directory is refused. GPU tests, with two
 * real processes: a first process compiles and saves the cubin; a second one
 * loads it without compiling, even with NVRTC gone; a cached file the
 * driver refuses is compiled again and replaced; "off" writes nothing.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* prepare compiles and loads every kernel of the TMA transport. */
#define TMA_KERNELS ((uint64_t)p2pt__kernel_count(&p2pt__transport_tma))

#include "gpu_test.h"

/* ------------------------------------------------------------ helpers */

static char tmp_root[256];

static void make_tmp_root(void)
{
    snprintf(tmp_root, sizeof(tmp_root), "/tmp/p2pt-cache-test-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp_root), "mkdtemp: %s", strerror(errno));
}

/* A fresh temporary root whose cache/ (not made yet) P2P_TRANSPORT_CACHE_DIR
 * names: into dir[len]. */
static void cache_in_tmp_root(char *dir, size_t len)
{
    make_tmp_root();
    snprintf(dir, len, "%s/cache", tmp_root);
    setenv("P2P_TRANSPORT_CACHE_DIR", dir, 1);
}

static void remove_tree(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", path);
}

static void cleanup(void)
{
    if (tmp_root[0] != '\0')
        remove_tree(tmp_root);
}

/* The smallest thing p2pt__cubin_complete accepts: an ELF64 header and a
 * section table of `shnum` entries right behind it. e_machine = 190
 * (EM_CUDA) unless `machine` says otherwise; no real sections. */
static unsigned char *fake_elf(size_t *size, unsigned shnum, uint16_t machine)
{
    *size = 64 + (size_t)shnum * 64;
    unsigned char *b = calloc(1, *size);
    cr_assert_not_null(b);
    memcpy(b, "\177ELF", 4);
    b[4] = 2; /* ELFCLASS64 */
    b[5] = 1; /* little-endian */
    b[6] = 1; /* EV_CURRENT */
    uint16_t type = 2, ehsize = 64, shentsize = 64, num = (uint16_t)shnum;
    uint64_t shoff = 64;
    memcpy(b + 0x10, &type, 2);
    memcpy(b + 0x12, &machine, 2);
    memcpy(b + 0x28, &shoff, 8);
    memcpy(b + 0x34, &ehsize, 2);
    memcpy(b + 0x3A, &shentsize, 2);
    memcpy(b + 0x3C, &num, 2);
    return b;
}

static void write_file(const char *path, const void *data, size_t n, mode_t mode)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    chmod(path, mode);
}

/* `dir` holds exactly `want` cubins (prepare writes one per kernel of the
 * TMA transport) and no temporary file; `name` gets the tma_copy one (or
 * the only one). */
static void cubins(const char *dir, uint64_t want, char *name, size_t len)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s", dir);
    uint64_t n = 0;
    struct dirent *e;
    name[0] = '\0';
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l > 6 && strcmp(e->d_name + l - 6, ".cubin") == 0) {
            if (name[0] == '\0' || strncmp(e->d_name, "tma_copy-", 9) == 0)
                snprintf(name, len, "%s", e->d_name);
            n++;
        } else if (strstr(e->d_name, ".tmp.") != NULL) {
            cr_assert_fail("a temporary file was left behind: %s", e->d_name);
        }
    }
    closedir(d);
    cr_assert_eq(n, want, "expected %llu cubin(s) in %s, found %llu", (unsigned long long)want,
                 dir, (unsigned long long)n);
}

TestSuite(cubin_cache, .fini = cleanup);

/* ------------------------------------------------------------ CPU tests */

Test(cubin_cache, name_depends_on_kernel_source_options_and_arch)
{
    char a[96], b[96], c[96], d[96], a2[96], e[96];
    p2pt__cubin_cache_name(a, sizeof(a), "tma_copy", "kernel one", "-O3", 90);
    p2pt__cubin_cache_name(a2, sizeof(a2), "tma_copy", "kernel one", "-O3", 90);
    p2pt__cubin_cache_name(b, sizeof(b), "tma_copy", "kernel two", "-O3", 90);
    p2pt__cubin_cache_name(c, sizeof(c), "tma_copy", "kernel one", "-O2", 90);
    p2pt__cubin_cache_name(d, sizeof(d), "tma_copy", "kernel one", "-O3", 100);
    p2pt__cubin_cache_name(e, sizeof(e), "batch", "kernel one", "-O3", 90);
    cr_assert(strncmp(e, "batch-sm_90-", 12) == 0, "%s", e);
    cr_assert_str_eq(a, a2, "the name must be stable");
    cr_assert(strncmp(a, "tma_copy-sm_90-", 15) == 0, "%s", a);
    cr_assert(strncmp(d, "tma_copy-sm_100-", 16) == 0, "%s", d);
    cr_assert_eq(strlen(a), strlen("tma_copy-sm_90-") + 16 + strlen(".cubin"), "%s", a);
    cr_assert_str_neq(a, b, "a changed source must not meet an old cubin");
    cr_assert_str_neq(a, c, "changed options must not meet an old cubin");
    cr_assert_str_neq(a, d);
}

Test(cubin_cache, completeness_check_refuses_truncated_and_foreign_files)
{
    size_t n;
    unsigned char *b = fake_elf(&n, 3, 190);
    cr_assert(p2pt__cubin_complete(b, n));
    cr_assert_not(p2pt__cubin_complete(b, n - 1), "a section table cut short");
    cr_assert_not(p2pt__cubin_complete(b, 63), "shorter than a header");
    cr_assert_not(p2pt__cubin_complete(NULL, n));
    b[4] = 1; /* ELFCLASS32 */
    cr_assert_not(p2pt__cubin_complete(b, n));
    b[4] = 2;
    b[0] = 'X';
    cr_assert_not(p2pt__cubin_complete(b, n), "no ELF magic");
    b[0] = 0x7f;
    uint64_t far = 1ull << 40; /* section table beyond the file */
    memcpy(b + 0x28, &far, 8);
    cr_assert_not(p2pt__cubin_complete(b, n));
    uint64_t wrap = ~0ull - 10; /* offset + size wraps around */
    memcpy(b + 0x28, &wrap, 8);
    cr_assert_not(p2pt__cubin_complete(b, n));
    free(b);
    unsigned char zeros[256] = {0};
    cr_assert_not(p2pt__cubin_complete(zeros, sizeof(zeros)));
}

Test(cubin_cache, write_then_read_round_trips_in_a_new_private_directory)
{
    make_tmp_root();
    char dir[400], why[1400], path[600];
    snprintf(dir, sizeof(dir), "%s/a/b/p2pt", tmp_root); /* parents made too */
    size_t n;
    unsigned char *b = fake_elf(&n, 5, 190);
    b[n - 1] = 0x42; /* some content to compare */
    cr_assert(p2pt__cubin_cache_write(dir, "k.cubin", b, n, why, sizeof(why)), "%s", why);
    snprintf(path, sizeof(path), "%s/k.cubin", dir);
    cr_assert_str_eq(why, path, "on success `why` is the path");
    struct stat sb;
    cr_assert_eq(stat(dir, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0700, "new cache directory mode %03o", sb.st_mode & 0777);
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0600, "cache file mode %03o", sb.st_mode & 0777);
    char name[128];
    cubins(dir, 1, name, sizeof(name));

    void *got = NULL;
    size_t got_n = 0;
    cr_assert_eq(p2pt__cubin_cache_read(dir, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_HIT, "%s", why);
    cr_assert_eq(got_n, n);
    cr_assert_arr_eq(got, b, n);
    free(got);

    /* A second write replaces the file in place (rename over it). */
    b[n - 1] = 0x43;
    cr_assert(p2pt__cubin_cache_write(dir, "k.cubin", b, n, why, sizeof(why)), "%s", why);
    cr_assert_eq(p2pt__cubin_cache_read(dir, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_HIT, "%s", why);
    cr_assert_eq(((unsigned char *)got)[n - 1], 0x43);
    free(got);
    cubins(dir, 1, name, sizeof(name));
    free(b);
}

Test(cubin_cache, missing_file_missing_directory_and_off_are_misses)
{
    make_tmp_root();
    char dir[400], why[1400];
    void *got = (void *)1;
    size_t n = 7;
    cr_assert_eq(p2pt__cubin_cache_read(tmp_root, "none.cubin", &got, &n, why, sizeof(why)),
                 P2PT_CACHE_MISS, "%s", why);
    cr_assert_null(got);
    cr_assert_eq(n, 0);
    snprintf(dir, sizeof(dir), "%s/not-yet", tmp_root);
    cr_assert_eq(p2pt__cubin_cache_read(dir, "none.cubin", &got, &n, why, sizeof(why)),
                 P2PT_CACHE_MISS, "%s", why);
    cr_assert_eq(p2pt__cubin_cache_read("", "none.cubin", &got, &n, why, sizeof(why)),
                 P2PT_CACHE_MISS);
    cr_assert(strstr(why, "off") != NULL, "%s", why);
    size_t fn;
    unsigned char *b = fake_elf(&fn, 1, 190);
    cr_assert_not(p2pt__cubin_cache_write("", "k.cubin", b, fn, why, sizeof(why)));
    free(b);
}

Test(cubin_cache, truncated_file_is_refused_with_its_path_and_size)
{
    make_tmp_root();
    char path[600], why[1400];
    size_t n;
    unsigned char *b = fake_elf(&n, 4, 190);
    snprintf(path, sizeof(path), "%s/k.cubin", tmp_root);
    write_file(path, b, n - 10, 0600); /* a writer that died mid-file */
    void *got = NULL;
    size_t got_n = 0;
    cr_assert_eq(p2pt__cubin_cache_read(tmp_root, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_UNUSABLE);
    cr_assert_null(got);
    cr_assert(strstr(why, "not a complete cubin") && strstr(why, path), "%s", why);
    /* and writing refuses an incomplete image too */
    cr_assert_not(p2pt__cubin_cache_write(tmp_root, "j.cubin", b, n - 10, why, sizeof(why)));
    cr_assert(strstr(why, "incomplete") != NULL, "%s", why);
    free(b);
}

/* What the writer sealed is checked before anything runs: a byte changed
 * on disk, a file copied in under another entry's name, one writable by
 * others, a FIFO where a file should be (opened without waiting for a
 * writer), and an image of another machine are each refused naming why. */
Test(cubin_cache, a_file_changed_renamed_shared_or_foreign_is_refused)
{
    make_tmp_root();
    char dir[400], path[600], other[600], why[1400];
    snprintf(dir, sizeof(dir), "%s/c", tmp_root);
    size_t n;
    unsigned char *b = fake_elf(&n, 4, 190);
    b[n - 1] = 0x42;
    cr_assert(p2pt__cubin_cache_write(dir, "k.cubin", b, n, why, sizeof(why)), "%s", why);
    snprintf(path, sizeof(path), "%s/k.cubin", dir);
    void *got = NULL;
    size_t got_n = 0;
    /* One byte of the image flipped. */
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, (long)n - 1, SEEK_SET), 0);
    cr_assert_eq(fputc(0x43, f), 0x43);
    fclose(f);
    cr_assert_eq(p2pt__cubin_cache_read(dir, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_UNUSABLE);
    cr_assert_null(got);
    cr_assert(strstr(why, "its bytes changed since it was written") != NULL, "%s", why);
    /* A whole, sealed file under another entry's name. */
    cr_assert(p2pt__cubin_cache_write(dir, "k.cubin", b, n, why, sizeof(why)), "%s", why);
    snprintf(other, sizeof(other), "%s/j.cubin", dir);
    cr_assert_eq(link(path, other), 0, "%s", strerror(errno));
    cr_assert_eq(p2pt__cubin_cache_read(dir, "j.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_UNUSABLE);
    cr_assert(strstr(why, "its trailer is another file's") != NULL, "%s", why);
    unlink(other);
    /* Writable by others. */
    cr_assert_eq(chmod(path, 0666), 0);
    cr_assert_eq(p2pt__cubin_cache_read(dir, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_UNUSABLE);
    cr_assert(strstr(why, "writable by no one else") != NULL, "%s", why);
    cr_assert_eq(chmod(path, 0600), 0);
    cr_assert_eq(p2pt__cubin_cache_read(dir, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_HIT, "%s", why);
    cr_assert_eq(got_n, n);
    free(got);
    /* A FIFO: refused at once, not waited on. */
    snprintf(other, sizeof(other), "%s/fifo.cubin", dir);
    cr_assert_eq(mkfifo(other, 0600), 0, "%s", strerror(errno));
    alarm(10); /* a hang fails the test rather than the suite's time */
    cr_assert_eq(p2pt__cubin_cache_read(dir, "fifo.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_UNUSABLE);
    alarm(0);
    cr_assert(strstr(why, "is not a regular file") != NULL, "%s", why);
    /* Another machine's image is neither written nor accepted. */
    free(b);
    b = fake_elf(&n, 4, 62 /* EM_X86_64 */);
    cr_assert_not(p2pt__cubin_complete(b, n));
    cr_assert_not(p2pt__cubin_cache_write(dir, "x.cubin", b, n, why, sizeof(why)));
    free(b);
}

Test(cubin_cache, directory_writable_by_others_is_not_trusted)
{
    make_tmp_root();
    char path[600], why[1400];
    size_t n;
    unsigned char *b = fake_elf(&n, 2, 190);
    snprintf(path, sizeof(path), "%s/k.cubin", tmp_root);
    write_file(path, b, n, 0600);
    cr_assert_eq(chmod(tmp_root, 0777), 0);
    void *got = NULL;
    size_t got_n = 0;
    cr_assert_eq(p2pt__cubin_cache_read(tmp_root, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_UNUSABLE);
    cr_assert_null(got);
    cr_assert(strstr(why, "not writable by group or others") && strstr(why, "777"), "%s",
              why);
    cr_assert_not(p2pt__cubin_cache_write(tmp_root, "j.cubin", b, n, why, sizeof(why)),
                  "nothing is written where others could swap it");
    cr_assert_eq(chmod(tmp_root, 0720), 0); /* group-writable: same verdict */
    cr_assert_eq(p2pt__cubin_cache_read(tmp_root, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_UNUSABLE);
    chmod(tmp_root, 0700);
    free(b);
}

Test(cubin_cache, symlinked_file_and_non_directory_are_refused)
{
    make_tmp_root();
    char path[600], link_path[600], why[1400], dir[700];
    size_t n;
    unsigned char *b = fake_elf(&n, 2, 190);
    snprintf(path, sizeof(path), "%s/real.cubin", tmp_root);
    snprintf(link_path, sizeof(link_path), "%s/k.cubin", tmp_root);
    write_file(path, b, n, 0600);
    cr_assert_eq(symlink(path, link_path), 0);
    void *got = NULL;
    size_t got_n = 0;
    cr_assert_eq(p2pt__cubin_cache_read(tmp_root, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_UNUSABLE, "a symlink must not be followed: %s", why);
    /* A regular file where the directory should be. */
    cr_assert_eq(p2pt__cubin_cache_read(path, "k.cubin", &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_UNUSABLE);
    cr_assert(strstr(why, "not a directory") != NULL, "%s", why);
    /* ...and under it nothing can be created (also as root). */
    snprintf(dir, sizeof(dir), "%s/sub", path);
    cr_assert_not(p2pt__cubin_cache_write(dir, "k.cubin", b, n, why, sizeof(why)));
    cr_assert(strstr(why, "cannot create cache directory") != NULL, "%s", why);
    free(b);
}

/* ------------------------------------------------------------ GPU tests */

/* What a process's first TMA prepare did, as p2pt counts it. */
struct first_prepare {
    p2pt_status st;
    uint64_t compilations, cache_hits;
};

static struct first_prepare prepare_once(void)
{
    struct first_prepare r = {0, 0, 0};
    p2pt_handle *h = NULL;
    p2pt_init_args a = {sizeof(a), NULL, "tma"};
    r.st = p2pt_init(&a, &h);
    if (r.st == P2PT_SUCCESS)
        r.st = p2pt_prepare(h, 0);
    if (h != NULL) {
        p2pt_properties p = {sizeof(p)};
        p2pt_get_properties(h, &p);
        r.compilations = p.compilations;
        r.cache_hits = p.cubin_cache_hits;
        p2pt_finalize(h);
    }
    return r;
}

/* A fresh process (fork before this one touches CUDA) makes its first TMA
 * prepare; its counters come back through a pipe. */
static struct first_prepare prepare_in_child(void)
{
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(fd[0]);
        struct first_prepare r = {P2PT_INTERNAL_ERROR, 0, 0};
        if (p2pt_test_driver_load("libcuda.so.1") == P2PT_SUCCESS)
            r = prepare_once();
        ssize_t w = write(fd[1], &r, sizeof(r));
        _exit(w == (ssize_t)sizeof(r) ? 0 : 1);
    }
    close(fd[1]);
    struct first_prepare r = {P2PT_INTERNAL_ERROR, 0, 0};
    ssize_t got = read(fd[0], &r, sizeof(r));
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(got == (ssize_t)sizeof(r) && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the child process failed (status 0x%x)", status);
    return r;
}

/* A GPU test that forks must not have touched CUDA itself first: probe the
 * device in a child, so the skip reason is still given. */
static void require_gpu_without_touching_it(void)
{
    GT_SKIP_NO_GPU_ASKED();
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int count = 0;
        bool ok = p2pt_test_driver_load("libcuda.so.1") == P2PT_SUCCESS &&
                  tcu.cuDeviceGetCount(&count) == CUDA_SUCCESS && count > 0;
        _exit(ok ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        cr_skip_test("no CUDA device: the driver could not be loaded or sees none");
}

static void copy_is_byte_exact(void)
{
    gt_use_device(0);
    p2pt_handle *h = gt_handle("tma");
    const size_t n = 3 * 48 * 1024 + 5;
    struct gt_buf src = gt_alloc(n + 16), dst = gt_alloc(n + 16);
    gt_fill(&src, 77);
    gt_poison(&dst);
    GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + 3), (const void *)(src.ptr + 3), n, NULL));
    GT_CHECK(tcu.cuCtxSynchronize());
    gt_expect_range(&dst, 3, &src, 3, n, "copy with the cached kernel");
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.tma_launches, 1, "the copy must have been a TMA launch");
    gt_free(&src);
    gt_free(&dst);
    p2pt_finalize(h);
}

/* A cached cubin the driver could not load for a reason of the moment (out
 * of memory) stays: the prepare is status 1 naming it, NVRTC is never
 * needed, and the next prepare loads the same file. Over the fake driver,
 * in child processes that pick it before their first driver call. */
static void prepare_twice_in_child(const char *fault, struct first_prepare out[2])
{
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fd[0]);
        struct first_prepare r[2];
        memset(r, 0, sizeof(r)); /* padding too: the pipe carries every byte */
        r[0].st = r[1].st = P2PT_INTERNAL_ERROR;
        if (fault != NULL)
            setenv("P2PT_FAULT", fault, 1);
#ifdef P2PT_FAKE_CUDA_PATH
        if (p2pt_test_driver_load(P2PT_FAKE_CUDA_PATH) == P2PT_SUCCESS) {
            p2pt_handle *h = NULL;
            p2pt_init_args a = {sizeof(a), NULL, "tma"};
            if (p2pt_init(&a, &h) == P2PT_SUCCESS) {
                for (int k = 0; k < 2; k++) {
                    r[k].st = p2pt_prepare(h, 0);
                    p2pt_properties p = {sizeof(p)};
                    p2pt_get_properties(h, &p);
                    r[k].compilations = p.compilations;
                    r[k].cache_hits = p.cubin_cache_hits;
                }
                p2pt_finalize(h);
            }
        }
#endif
        ssize_t w = write(fd[1], r, sizeof(r[0]) * 2);
        _exit(w == (ssize_t)(sizeof(r[0]) * 2) ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], out, sizeof(out[0]) * 2);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(got == (ssize_t)(sizeof(out[0]) * 2) && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0,
              "the child process failed (status 0x%x)", status);
}

Test(cubin_cache, a_load_failure_of_the_moment_keeps_the_cached_cubin)
{
#ifndef P2PT_FAKE_CUDA_PATH
    cr_skip_test("no fake driver: tests/fault/ is not built here");
#else
    char dir[400], name[128];
    cache_in_tmp_root(dir, sizeof(dir));
    setenv("P2P_CUDA_LIBRARY", P2PT_FAKE_CUDA_PATH, 1);
    setenv("P2P_NVRTC_LIBRARY", P2PT_FAKE_NVRTC_PATH, 1);
    struct first_prepare r[2];
    prepare_twice_in_child(NULL, r);
    cr_assert_eq(r[0].st, P2PT_SUCCESS, "first process: status %d", (int)r[0].st);
    cr_assert_eq(r[0].compilations, TMA_KERNELS);
    cubins(dir, TMA_KERNELS, name, sizeof(name));
    setenv("P2P_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13", 1);
    prepare_twice_in_child("cuModuleLoadData:1:2" /* CUDA_ERROR_OUT_OF_MEMORY */, r);
    cr_assert_eq(r[0].st, P2PT_CUDA_ERROR, "the first load: status %d, expected 1",
                 (int)r[0].st);
    cr_assert_eq(r[0].compilations, 0, "nothing compiled: the cubin was not the fault");
    cr_assert_eq(r[1].st, P2PT_SUCCESS, "the next prepare: status %d", (int)r[1].st);
    cr_assert_eq(r[1].compilations, 0);
    cr_assert_eq(r[1].cache_hits, TMA_KERNELS, "every cubin from the cache");
    cubins(dir, TMA_KERNELS, name, sizeof(name));
#endif
}

Test(cubin_cache, second_process_loads_the_cubin_without_nvrtc)
{
    require_gpu_without_touching_it();
    char dir[400], name[128], path[600];
    cache_in_tmp_root(dir, sizeof(dir));

    struct first_prepare first = prepare_in_child();
    cr_assert_eq(first.st, P2PT_SUCCESS, "first process: status %d", (int)first.st);
    cr_assert_eq(first.compilations, TMA_KERNELS, "first process compiles every kernel");
    cr_assert_eq(first.cache_hits, 0);
    cubins(dir, TMA_KERNELS, name, sizeof(name));
    cr_assert(strncmp(name, "tma_copy-sm_", 12) == 0, "%s", name);

    /* The second process cannot even open NVRTC. */
    setenv("P2P_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13", 1);
    struct first_prepare second = prepare_in_child();
    cr_assert_eq(second.st, P2PT_SUCCESS, "second process: status %d", (int)second.st);
    cr_assert_eq(second.compilations, 0, "second process must not compile");
    cr_assert_eq(second.cache_hits, TMA_KERNELS);

    /* And this process, also without NVRTC, copies correctly with it. */
    gt_require_gpus(1);
    setenv("P2P_TRANSPORT_CACHE_DIR", dir, 1); /* gt_require_gpus turned it off */
    copy_is_byte_exact();
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    p2pt_properties p = {sizeof(p)};
    p2pt_handle *h = gt_handle("tma");
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.compilations, 0);
    cr_assert_eq(p.cubin_cache_hits, 1);
    p2pt_finalize(h);
}

/* The driver's verdict for a complete ELF that is not a CUDA image. The
 * logger also calls back into p2pt (prepare takes the JIT lock): p2pt
 * promises never to call the logger while holding a lock, so this must not
 * deadlock. */
static int refused_warnings;
static p2pt_handle *logger_handle;
static p2pt_status reentrant_status = P2PT_INTERNAL_ERROR;
static void warning_logger(p2pt_log_level level, unsigned long flags, const char *file,
                           int line, const char *fmt, ...)
{
    (void)flags, (void)file, (void)line;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level == P2PT_LOG_WARN && strstr(msg, "driver refused the cached cubin") != NULL) {
        refused_warnings++;
        if (logger_handle != NULL)
            reentrant_status = p2pt_prepare(logger_handle, 0);
    }
}

Test(cubin_cache, cubin_the_driver_refuses_is_compiled_again_and_replaced)
{
    require_gpu_without_touching_it();
    char dir[400], name[128], path[600], why[1400];
    cache_in_tmp_root(dir, sizeof(dir));
    struct first_prepare first = prepare_in_child();
    cr_assert_eq(first.st, P2PT_SUCCESS);
    cubins(dir, TMA_KERNELS, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", dir, name);

    /* Sealed by the cache's own writer (every read check passes), but no
     * image the driver loads: an EM_CUDA header over empty sections. */
    size_t n;
    unsigned char *bad = fake_elf(&n, 3, 190);
    cr_assert(p2pt__cubin_cache_write(dir, name, bad, n, why, sizeof(why)), "%s", why);
    free(bad);

    gt_require_gpus(1);
    setenv("P2P_TRANSPORT_CACHE_DIR", dir, 1);
    gt_use_device(0);
    p2pt_init_args a = {sizeof(a), warning_logger, "tma"};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&a, &h));
    logger_handle = h;
    GT_OK(p2pt_prepare(h, 0));
    logger_handle = NULL;
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(refused_warnings, 1, "one WARN naming the refused cubin");
    cr_assert_eq(reentrant_status, P2PT_SUCCESS, "prepare from inside the logger: %d",
                 (int)reentrant_status);
    cr_assert_eq(p.compilations, 1, "compiled again");
    cr_assert_eq(p.cubin_cache_hits, TMA_KERNELS - 1,
                 "a refused cubin is not a hit (the other kernels' are)");
    p2pt_finalize(h);

    /* The file now holds the fresh cubin: complete and a CUDA image. */
    void *got = NULL;
    size_t got_n = 0;
    cr_assert_eq(p2pt__cubin_cache_read(dir, name, &got, &got_n, why, sizeof(why)),
                 P2PT_CACHE_HIT, "%s", why);
    uint16_t machine;
    memcpy(&machine, (unsigned char *)got + 0x12, 2);
    cr_assert_eq(machine, 190, "e_machine %u, expected EM_CUDA (190)", machine);
    free(got);
    copy_is_byte_exact();
}

/* Flip the first `n` bytes of every .text section of the cubin at `path`
 * (its code), leaving the file whole: size, ELF headers and trailer. */
static unsigned flip_code(const char *path, size_t n)
{
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    unsigned char *b = malloc((size_t)size);
    cr_assert_not_null(b);
    fseek(f, 0, SEEK_SET);
    cr_assert_eq(fread(b, 1, (size_t)size, f), (size_t)size);
    uint64_t shoff;
    uint16_t shnum, shstrndx;
    memcpy(&shoff, b + 0x28, 8);
    memcpy(&shnum, b + 0x3C, 2);
    memcpy(&shstrndx, b + 0x3E, 2);
    uint64_t strs;
    memcpy(&strs, b + shoff + (uint64_t)shstrndx * 64 + 0x18, 8);
    unsigned flipped = 0;
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *sh = b + shoff + (uint64_t)i * 64;
        uint32_t name;
        uint64_t off, sz;
        memcpy(&name, sh, 4);
        memcpy(&off, sh + 0x18, 8);
        memcpy(&sz, sh + 0x20, 8);
        if (strncmp((const char *)b + strs + name, ".text.", 6) != 0 || sz < n)
            continue;
        for (size_t j = 0; j < n; j++)
            b[off + j] ^= 0xff;
        flipped++;
    }
    fseek(f, 0, SEEK_SET);
    cr_assert_eq(fwrite(b, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    free(b);
    return flipped;
}

/* The driver does not check code bytes: a cached cubin whose code changed
 * on disk would load and fault the GPU (one H200: status 0 from the copy,
 * then CUDA_ERROR_ILLEGAL_INSTRUCTION). Its trailer's hash no longer
 * matches, so it is compiled again, replaced, and the copy is exact. */
Test(cubin_cache, a_cubin_whose_code_changed_on_disk_is_compiled_again_not_run)
{
    require_gpu_without_touching_it();
    char dir[400], name[128], path[600];
    cache_in_tmp_root(dir, sizeof(dir));
    struct first_prepare first = prepare_in_child();
    cr_assert_eq(first.st, P2PT_SUCCESS);
    cubins(dir, TMA_KERNELS, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    cr_assert_gt(flip_code(path, 32), 0, "no code section found in %s", path);
    struct first_prepare second = prepare_in_child();
    cr_assert_eq(second.st, P2PT_SUCCESS, "status %d", (int)second.st);
    cr_assert_eq(second.compilations, 1, "the damaged cubin compiled again");
    cr_assert_eq(second.cache_hits, TMA_KERNELS - 1);
    gt_require_gpus(1);
    setenv("P2P_TRANSPORT_CACHE_DIR", dir, 1);
    copy_is_byte_exact();
}

Test(cubin_cache, off_writes_nothing_and_default_follows_xdg_cache_home)
{
    require_gpu_without_touching_it();
    make_tmp_root();
    char xdg[400], home[400], name[128], dir[500];
    snprintf(xdg, sizeof(xdg), "%s/xdg", tmp_root);
    snprintf(home, sizeof(home), "%s/home", tmp_root);
    cr_assert_eq(mkdir(home, 0700), 0);
    setenv("HOME", home, 1);
    setenv("XDG_CACHE_HOME", xdg, 1);

    setenv("P2P_TRANSPORT_CACHE_DIR", "OFF", 1);
    struct first_prepare off = prepare_in_child();
    cr_assert_eq(off.st, P2PT_SUCCESS);
    cr_assert_eq(off.compilations, TMA_KERNELS);
    struct stat sb;
    cr_assert_neq(stat(xdg, &sb), 0, "\"off\" must not create %s", xdg);
    snprintf(dir, sizeof(dir), "%s/.cache", home);
    cr_assert_neq(stat(dir, &sb), 0, "\"off\" must not create %s", dir);

    unsetenv("P2P_TRANSPORT_CACHE_DIR");
    struct first_prepare dflt = prepare_in_child();
    cr_assert_eq(dflt.st, P2PT_SUCCESS);
    snprintf(dir, sizeof(dir), "%s/p2pt", xdg);
    cubins(dir, TMA_KERNELS, name, sizeof(name));
    struct first_prepare again = prepare_in_child();
    cr_assert_eq(again.compilations, 0);
    cr_assert_eq(again.cache_hits, TMA_KERNELS);
}
