/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Everything p2pt-bench writes besides the tables' own cells: error texts
 * and how a failure ends the run, the bookkeeping that keeps a table row in
 * one piece on the terminal, and the --csv / --json records.
 *
 * The CSV columns are read by name by bench/plot.sh; keep them. The
 * alltoall mode has columns of its own: in --csv when it runs alone,
 * else in a file of their own beside it (FILE-alltoall.csv).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

char bench_err[2048];
int bench_failures;

/* ============================================================== errors */

void bench_one_line(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r' || *s == '\t')
            *s = ' ';
}

void bench_set_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bench_err, sizeof(bench_err), fmt, ap);
    va_end(ap);
    bench_one_line(bench_err);
}

/* "cuMemAlloc" out of "tcu.cuMemAlloc(&a->base, n)". */
static const char *call_name(const char *text, char *buf, size_t len)
{
    if (strncmp(text, "tcu.", 4) == 0)
        text += 4;
    size_t n = strcspn(text, "(");
    if (n >= len)
        n = len - 1;
    memcpy(buf, text, n);
    buf[n] = '\0';
    return buf;
}

void bench_fail_cu(CUresult r, const char *text, const char *file, int line)
{
    char name[64];
    const char *base = strrchr(file, '/');
    bench_set_err("%s failed: %s (%s:%d)", call_name(text, name, sizeof(name)),
                  p2pt__cuda_error_name(r), base ? base + 1 : file, line);
}

void bench_fail_p2(p2pt_status st, const char *text)
{
    char name[64];
    bench_set_err("%s: %s: %s", call_name(text, name, sizeof(name)), p2pt_status_string(st),
                  p2pt_last_error(NULL));
}

void bench_cu_release(CUresult r, const char *text, const char *file, int line)
{
    if (r == CUDA_SUCCESS)
        return;
    bench_fail_cu(r, text, file, line);
    fprintf(stderr, "p2pt-bench: warning: %s\n", bench_err);
    bench_failures++;
}

void bench_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("p2pt-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* A table row is half printed: a fatal message starts on a new line. */
static bool mid_row;

void bench_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (mid_row)
        putchar('\n');
    fflush(stdout);
    fputs("p2pt-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, ": %s\n", bench_err);
    va_end(ap);
    exit(1);
}

const char *bench_fmt_size(size_t b, char *buf, size_t len)
{
    if (b >= GiB && b % GiB == 0)
        snprintf(buf, len, "%zuG", b / GiB);
    else if (b >= MiB && b % MiB == 0)
        snprintf(buf, len, "%zuM", b / MiB);
    else if (b >= KiB && b % KiB == 0)
        snprintf(buf, len, "%zuK", b / KiB);
    else
        snprintf(buf, len, "%zu", b);
    return buf;
}

/* ================================================================= rows */

/* Differences found while a row is being printed, shown once the row is
 * complete so stderr does not cut a table line in two. */
static char pending[8][512];
static int n_pending;

void bench_row_begin(void) { mid_row = true; }

void bench_row_end(void)
{
    mid_row = false;
    fflush(stdout);
    for (int i = 0; i < n_pending; i++)
        fprintf(stderr, "p2pt-bench: CHECK FAILED: %s\n", pending[i]);
    n_pending = 0;
}

void bench_row_check_failed(const char *fmt, ...)
{
    bench_failures++;
    if (n_pending == (int)P2PT_ARRAY_LEN(pending))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pending[n_pending++], sizeof(pending[0]), fmt, ap);
    va_end(ap);
}

/* ========================================================= result files */

static FILE *csv_file, *json_file, *alltoall_file;
static char alltoall_path[1024];
static int json_records;

static FILE *open_output(const char *flag, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        bench_usage_error("%s \"%s\": cannot write: %s", flag, path, strerror(errno));
    return f;
}

/* atexit: a run that stops half way still leaves a valid JSON array. */
static void close_outputs(void)
{
    if (csv_file && fclose(csv_file) != 0)
        fprintf(stderr, "p2pt-bench: writing %s: %s\n", bench_opt.csv, strerror(errno));
    if (alltoall_file && fclose(alltoall_file) != 0)
        fprintf(stderr, "p2pt-bench: writing %s: %s\n", alltoall_path, strerror(errno));
    if (json_file) {
        fputs(json_records ? "\n]\n" : "]\n", json_file);
        if (fclose(json_file) != 0)
            fprintf(stderr, "p2pt-bench: writing %s: %s\n", bench_opt.json, strerror(errno));
    }
    csv_file = json_file = alltoall_file = NULL;
}

/* --csv's name with -alltoall before its .csv (or at its end). */
static void alltoall_beside(const char *csv, char *out, size_t len)
{
    size_t n = strlen(csv);
    if (n > 4 && strcmp(csv + n - 4, ".csv") == 0)
        snprintf(out, len, "%.*s-alltoall.csv", (int)(n - 4), csv);
    else
        snprintf(out, len, "%s-alltoall.csv", csv);
}

void bench_open_outputs(bool alltoall, bool alone)
{
    if (bench_opt.csv && !alone) {
        csv_file = open_output("--csv", bench_opt.csv);
        fputs("mode,path,transport,bytes,chunk,stages,max_ctas,time_us,gbps,kind,vs_contig,"
              "vs_ref\n",
              csv_file);
    }
    if (bench_opt.csv && alltoall) {
        if (alone)
            snprintf(alltoall_path, sizeof(alltoall_path), "%s", bench_opt.csv);
        else
            alltoall_beside(bench_opt.csv, alltoall_path, sizeof(alltoall_path));
        alltoall_file = open_output("--csv", alltoall_path);
        fputs("gpus,rows,row_bytes,frac,way,sm_budget,max_ctas,gbps_per_gpu,vs_ce_packed,"
              "vs_nccl\n",
              alltoall_file);
    }
    if (bench_opt.json) {
        json_file = open_output("--json", bench_opt.json);
        fputs("[", json_file);
    }
    atexit(close_outputs);
}

/* Written and flushed at once, so a crash loses nothing measured before it.
 * `ratios` (batch rows): {vs_contig, vs_ref}, 0 where there is no anchor;
 * NULL leaves both cells empty. */
static void emit(const char *mode, const char *path, int transport,
                 const struct bench_tma_cfg *cfg, size_t bytes, double time_us, double gbps,
                 const char *kind, const double *ratios)
{
    struct bench_tma_cfg none = {0, 0, 0};
    const char *tname = bench_transport_names[transport];
    char rc[64] = ",", rj[96] = "";
    if (cfg == NULL || transport != T_TMA)
        cfg = &none;
    if (ratios) {
        snprintf(rc, sizeof(rc), "%.4f,%.4f", ratios[0], ratios[1]);
        snprintf(rj, sizeof(rj), ", \"vs_contig\": %.4f, \"vs_ref\": %.4f", ratios[0],
                 ratios[1]);
    }
    if (csv_file) {
        fprintf(csv_file, "%s,%s,%s,%zu,%zu,%d,%d,%.3f,%.3f,%s,%s\n", mode, path, tname, bytes,
                cfg->chunk, cfg->stages, cfg->max_ctas, time_us, gbps, kind, rc);
        fflush(csv_file);
    }
    if (json_file) {
        fprintf(json_file,
                "%s\n  {\"mode\": \"%s\", \"path\": \"%s\", \"transport\": \"%s\", "
                "\"bytes\": %zu, \"chunk\": %zu, \"stages\": %d, \"max_ctas\": %d, "
                "\"time_us\": %.3f, \"gbps\": %.3f, \"kind\": \"%s\"%s}",
                json_records ? "," : "", mode, path, tname, bytes, cfg->chunk, cfg->stages,
                cfg->max_ctas, time_us, gbps, kind, rj);
        json_records++;
        fflush(json_file);
    }
}

void bench_emit(const char *mode, const char *path, int transport,
                const struct bench_tma_cfg *cfg, size_t bytes, double time_us, double gbps,
                const char *kind)
{
    emit(mode, path, transport, cfg, bytes, time_us, gbps, kind, NULL);
}

void bench_emit_ratios(const char *mode, const char *path, int transport,
                       const struct bench_tma_cfg *cfg, size_t bytes, double time_us,
                       double gbps, const char *kind, double vs_contig, double vs_ref)
{
    double r[2] = {vs_contig, vs_ref};
    emit(mode, path, transport, cfg, bytes, time_us, gbps, kind, r);
}

const char *bench_alltoall_csv_path(void) { return alltoall_file ? alltoall_path : NULL; }

/* An empty cell (and a JSON null) where a value is not known. */
static void cell(char *buf, size_t len, double v, const char *fmt)
{
    if (v < 0)
        buf[0] = '\0';
    else
        snprintf(buf, len, fmt, v);
}

void bench_emit_alltoall(const struct bench_alltoall_record *r)
{
    char budget[16] = "default", ctas[32], vs_ce[32], vs_nccl[32];
    if (r->sm_budget >= 0)
        snprintf(budget, sizeof(budget), "%d", r->sm_budget);
    cell(ctas, sizeof(ctas), (double)r->max_ctas, "%.0f");
    cell(vs_ce, sizeof(vs_ce), r->vs_ce_packed, "%.4f");
    cell(vs_nccl, sizeof(vs_nccl), r->vs_nccl, "%.4f");
    if (alltoall_file) {
        fprintf(alltoall_file, "%d,%zu,%zu,%g,%s,%s,%s,%.3f,%s,%s\n", r->gpus, r->rows,
                r->row_bytes, r->frac, r->way, budget, ctas, r->gbps_per_gpu, vs_ce, vs_nccl);
        fflush(alltoall_file);
    }
    if (json_file) {
        fprintf(json_file,
                "%s\n  {\"mode\": \"alltoall\", \"gpus\": %d, \"rows\": %zu, "
                "\"row_bytes\": %zu, \"frac\": %g, \"way\": \"%s\", \"sm_budget\": \"%s\", "
                "\"max_ctas\": %s, \"gbps_per_gpu\": %.3f, \"vs_ce_packed\": %s, "
                "\"vs_nccl\": %s}",
                json_records ? "," : "", r->gpus, r->rows, r->row_bytes, r->frac, r->way,
                budget, ctas[0] ? ctas : "null", r->gbps_per_gpu, vs_ce[0] ? vs_ce : "null",
                vs_nccl[0] ? vs_nccl : "null");
        json_records++;
        fflush(json_file);
    }
}
