/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Run-time compilation, on a CPU (NVRTC needs no GPU): the embedded kernel
 * is byte-for-byte kernels/tma_copy.cu, and the generated table holds every
 * file of kernels/; it compiles to an sm_90 cubin (ELF)
 * and to PTX holding cp.async.bulk loads and stores and mbarrier waits; a
 * broken source gives status 8 with the NVRTC log; a missing NVRTC gives
 * status 8 naming what was tried; no kernel entry spills registers on
 * sm_90. Everything is freed (ASan/valgrind runs).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "p2pt_internal.h"

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void require_nvrtc(void)
{
    if (p2pt__nvrtc_load(getenv("P2P_NVRTC_LIBRARY")) != P2PT_SUCCESS)
        cr_skip_test("no NVRTC: %s", p2pt__last_error_text());
}

/* NVRTC compiling every kernel runs for minutes under valgrind (244 s for
 * the spill check alone), most of the CI's time, and checks NVRTC's memory
 * more than p2pt's: scripts/test.sh's valgrind phase sets
 * P2PT_TEST_UNDER_VALGRIND=1 and these tests skip there; the sanitizer and
 * plain phases run them. One compile (kernel_compiles_to_an_sm90_cubin)
 * and the failing one stay under valgrind. */
static void skip_under_valgrind(void)
{
    if (gt_under_valgrind())
        cr_skip_test("under valgrind: NVRTC compiles every kernel for minutes there; the "
                     "sanitizer and plain phases run this test");
}

static void require_nvrtc_not_under_valgrind(void)
{
    skip_under_valgrind();
    require_nvrtc();
}

Test(jit, embedded_source_is_the_kernel_file)
{
    size_t len;
    char *file = read_file(P2PT_KERNEL_PATH, &len);
    cr_assert_eq(p2pt__tma_copy_source_len, len);
    cr_assert_eq(memcmp(file, p2pt__tma_copy_source, len), 0,
                 "the library embeds a stale copy of kernels/tma_copy.cu");
    cr_assert_eq(p2pt__tma_copy_source[len], '\0');
    free(file);
}

/* The generated table holds every file of kernels/, byte for byte, and
 * every kernel a transport describes is one of its rows. */
Test(jit, the_generated_source_table_is_every_file_of_kernels)
{
    static const char *const files[] = {"batch_copy.cu", "batch_tiles.cuh", "p2pt_kernel_abi.h",
                                        "stream_copy.cu", "tma_copy.cu", "tma_ptx.cuh"};
    int rows = 0;
    while (p2pt__kernel_sources[rows].file != NULL)
        rows++;
    cr_assert_geq(rows, (int)(sizeof(files) / sizeof(files[0])));
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        char path[512], name[64];
        snprintf(path, sizeof(path), "%s/kernels/%s", P2PT_SOURCE_DIR, files[f]);
        snprintf(name, sizeof(name), "kernels/%s", files[f]);
        const struct p2pt_kernel_source *row = NULL;
        for (int r = 0; r < rows && row == NULL; r++)
            if (strcmp(p2pt__kernel_sources[r].file, name) == 0)
                row = &p2pt__kernel_sources[r];
        cr_assert_not_null(row, "no row for %s", name);
        size_t len;
        char *text = read_file(path, &len);
        cr_assert_eq(*row->len, len, "%s", name);
        cr_assert_eq(memcmp(text, row->text, len), 0, "%s is stale", name);
        free(text);
    }
    for (int k = 0; k < p2pt__kernel_count(&p2pt__transport_tma); k++) {
        const struct p2pt_kernel *kn = p2pt__transport_tma.kernels[k];
        bool listed = false;
        for (int r = 0; r < rows; r++)
            listed = listed || (strcmp(p2pt__kernel_sources[r].file, kn->file) == 0 &&
                                p2pt__kernel_sources[r].text == kn->source);
        cr_assert(listed, "%s is not the table's text of its file", kn->file);
    }
}

Test(jit, every_kernel_of_every_transport_compiles_for_sm90_with_its_entry_points)
{
    require_nvrtc_not_under_valgrind();
    for (int k = 0; k < p2pt__kernel_count(&p2pt__transport_tma); k++) {
        const struct p2pt_kernel *kn = p2pt__transport_tma.kernels[k];
        char *ptx = NULL;
        p2pt_status st = p2pt__jit_compile_ptx(kn->source, kn->defines, 90, NULL, &ptx);
        cr_assert_eq(st, P2PT_SUCCESS, "%s: %s", kn->file, p2pt__last_error_text());
        for (int e = 0; e < P2PT_KERNEL_MAX_ENTRIES && kn->entries[e] != NULL; e++)
            cr_assert(strstr(ptx, kn->entries[e]) != NULL, "%s has no entry %s", kn->file,
                      kn->entries[e]);
        free(ptx);
    }
}

/* NVRTC's log for kernel `kn` compiled for sm_90 as the library compiles it
 * (jit.c's options), with ptxas reporting each entry's resources. */
static char *ptxas_report(const struct p2pt_kernel *kn)
{
    const char *const *names, *const *texts;
    const int n_headers = p2pt__jit_headers(&names, &texts);
    const char *opts[12] = {"--gpu-architecture=sm_90", "--std=c++17", "--ptxas-options=-v"};
    int n = 3;
    for (int i = 0; kn->defines[i] != NULL && n < 11; i++)
        opts[n++] = kn->defines[i];
    opts[n++] = "-minimal";
    nvrtcProgram prog = NULL;
    cr_assert_eq(
        p2pt__nv.nvrtcCreateProgram(&prog, kn->source, "p2pt_kernel.cu", n_headers, texts,
                                    names),
        NVRTC_SUCCESS);
    nvrtcResult r = p2pt__nv.nvrtcCompileProgram(prog, n, opts);
    if (r == NVRTC_ERROR_INVALID_OPTION) { /* an NVRTC before -minimal, as in jit.c */
        p2pt__nv.nvrtcDestroyProgram(&prog);
        cr_assert_eq(p2pt__nv.nvrtcCreateProgram(&prog, kn->source, "p2pt_kernel.cu", n_headers,
                                                 texts, names),
                     NVRTC_SUCCESS);
        r = p2pt__nv.nvrtcCompileProgram(prog, n - 1, opts);
    }
    cr_assert_eq(r, NVRTC_SUCCESS, "%s: %s", kn->file, p2pt__nv.nvrtcGetErrorString(r));
    size_t size = 0;
    cr_assert_eq(p2pt__nv.nvrtcGetProgramLogSize(prog, &size), NVRTC_SUCCESS);
    char *log = malloc(size + 1);
    cr_assert_eq(p2pt__nv.nvrtcGetProgramLog(prog, log), NVRTC_SUCCESS);
    log[size] = '\0';
    p2pt__nv.nvrtcDestroyProgram(&prog);
    return log;
}

/* A spill is local memory traffic in a kernel that the copy itself keeps
 * busy: the batch kernels' entries share copy_block, and an extra inlined
 * call of it once made the ring entry (host batches) spill while the
 * device entry did not. */
Test(jit, no_kernel_entry_spills_registers_on_sm90)
{
    /* NVRTC takes a cubin it compiled before from CUDA's compute cache
     * (~/.nv/ComputeCache) without running ptxas, and then logs nothing:
     * the second run of this test on a machine read 0 entries. */
    setenv("CUDA_CACHE_DISABLE", "1", 1);
    require_nvrtc_not_under_valgrind();
    int entries = 0;
    char first_log[1024] = "";
    for (int k = 0; k < p2pt__kernel_count(&p2pt__transport_tma); k++) {
        const struct p2pt_kernel *kn = p2pt__transport_tma.kernels[k];
        char *log = ptxas_report(kn);
        if (k == 0)
            snprintf(first_log, sizeof(first_log), "%s: \"%s\"", kn->file, log);
        const char *at = log;
        while ((at = strstr(at, "Compiling entry function '")) != NULL) {
            char entry[96] = "";
            sscanf(at, "Compiling entry function '%95[^']'", entry);
            const char *spills = strstr(at, "bytes spill stores");
            cr_assert_not_null(spills, "%s: no resource line for %s:\n%s", kn->file, entry, log);
            while (spills > at && spills[-1] != ',')
                spills--; /* back to the count of spill stores */
            unsigned stores = 1, loads = 1;
            cr_assert_eq(sscanf(spills, " %u bytes spill stores, %u bytes spill loads", &stores,
                                &loads),
                         2, "%s: %s", kn->file, entry);
            cr_expect(stores == 0 && loads == 0,
                      "%s: entry %s spills (%u bytes stored, %u loaded) on sm_90", kn->file, entry,
                      stores, loads);
            entries++;
            at = spills;
        }
        free(log);
    }
    cr_assert_geq(entries, 5, "ptxas reported %d entries; the first kernel's log: %s", entries,
                  first_log);
}

Test(jit, kernel_compiles_to_an_sm90_cubin)
{
    require_nvrtc();
    void *cubin = NULL;
    size_t size = 0;
    p2pt_status st = p2pt__jit_compile(p2pt__tma_copy_source, NULL, 90, NULL, &cubin, &size);
    cr_assert_eq(st, P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert(size > 1000, "cubin of %zu bytes", size);
    cr_assert_eq(memcmp(cubin, "\x7f" "ELF", 4), 0, "not an ELF cubin");
    /* The cubin cache's completeness check accepts what NVRTC makes, and
     * refuses it one byte short. */
    cr_assert(p2pt__cubin_complete(cubin, size), "real cubin judged incomplete");
    cr_assert_not(p2pt__cubin_complete(cubin, size - 1), "truncation not detected");
    free(cubin);
}

Test(jit, an_empty_nvrtc_path_means_the_default_search)
{
    /* The first load in this process, through "" rather than NULL. */
    skip_under_valgrind();
    void *cubin = NULL;
    size_t size = 0;
    p2pt_status st = p2pt__jit_compile(p2pt__tma_copy_source, NULL, 90, "", &cubin, &size);
    if (st == P2PT_COMPILE_ERROR && strstr(p2pt__last_error_text(), "cannot load NVRTC"))
        cr_skip_test("no NVRTC: %s", p2pt__last_error_text());
    cr_assert_eq(st, P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert(size > 1000 && memcmp(cubin, "\x7f" "ELF", 4) == 0, "cubin of %zu bytes", size);
    free(cubin);
}

Test(jit, ptx_has_bulk_loads_stores_and_mbarrier_waits)
{
    require_nvrtc_not_under_valgrind();
    char *ptx = NULL;
    p2pt_status st = p2pt__jit_compile_ptx(p2pt__tma_copy_source, NULL, 90, NULL, &ptx);
    cr_assert_eq(st, P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_assert(strstr(ptx, ".entry p2pt_tma_copy") != NULL, "no kernel entry");
    cr_assert(strstr(ptx, "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"),
              "no bulk global->shared load");
    cr_assert(strstr(ptx, "cp.async.bulk.global.shared::cta.bulk_group"),
              "no bulk shared->global store");
    cr_assert(strstr(ptx, "mbarrier.try_wait.parity"), "no mbarrier wait");
    cr_assert(strstr(ptx, "cp.async.bulk.wait_group.read"), "no read wait before refill");
    cr_assert(strstr(ptx, "cp.async.bulk.wait_group 0"), "no full wait before exit");
    free(ptx);
}

Test(jit, a_broken_source_is_status_8_with_the_log)
{
    require_nvrtc();
    void *cubin = (void *)0x1;
    size_t size = 0;
    p2pt_status st = p2pt__jit_compile("extern \"C\" __global__ void k() { this is not cuda; }",
                                       NULL, 90, NULL, &cubin, &size);
    cr_assert_eq(st, P2PT_COMPILE_ERROR);
    cr_assert_null(cubin);
    const char *msg = p2pt__last_error_text();
    cr_assert(strstr(msg, "error") != NULL && strstr(msg, "sm_90") != NULL, "%s", msg);
    /* The log excerpt points at the bad line, not only at the status. */
    cr_assert(strstr(msg, "this") != NULL || strstr(msg, "identifier") != NULL,
              "no NVRTC log excerpt: %s", msg);
    /* Same for the PTX path, and nothing is handed out. */
    char *ptx = (char *)0x1;
    st = p2pt__jit_compile_ptx("extern \"C\" __global__ void k() { this is not cuda; }", NULL, 90,
                               NULL, &ptx);
    cr_assert_eq(st, P2PT_COMPILE_ERROR);
    cr_assert_null(ptx);
    cr_assert(strstr(p2pt__last_error_text(), "compute_90") != NULL, "%s",
              p2pt__last_error_text());
}

Test(jit, missing_nvrtc_is_status_8_naming_what_was_tried)
{
    void *cubin = NULL;
    size_t size = 0;
    p2pt_status st = p2pt__jit_compile(p2pt__tma_copy_source, NULL, 90, "/nonexistent/libnvrtc.so.13",
                                       &cubin, &size);
    cr_assert_eq(st, P2PT_COMPILE_ERROR);
    cr_assert(strstr(p2pt__last_error_text(), "/nonexistent/libnvrtc.so.13") != NULL, "%s",
              p2pt__last_error_text());
}
