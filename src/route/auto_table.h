/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The crossover table of the `auto` transport: for one GPU architecture,
 * which engine runs a copy (by path and size), a copy captured into a CUDA
 * graph, and a batch (by mean piece size). Parsed from text: a file that
 * `p2pt-bench --mode calibrate` wrote (P2P_TRANSPORT_AUTO_TABLE), or one of
 * the built-in tables (auto_defaults.c), whose numbers come from runs
 * recorded in bench/results/auto.md. CUDA-free: the router (router.c) maps
 * engine indices to transports and paths to requests.
 *
 * The text, one item per line, `#` to the end of a line is a comment:
 *
 *     p2pt-auto 1                  format version; the first item
 *     arch sm_90                   compute capability the numbers are for
 *     device NVIDIA H100 ...       optional, the GPU that was measured
 *     copy local 0 tma             local copies from 0 bytes on: tma
 *     copy local 4M ce             ... from 4 MiB on: ce
 *     copy push 0 ce               every path: local, push, pull
 *     copy pull 0 tma
 *     copy h2d 0 tma               optional: pinned host memory to the
 *     copy d2h 0 ce                stream's device, and back; absent = the
 *                                  fallback engine (ce), as for pageable
 *                                  memory and host to host, which have no
 *                                  list
 *     graph push 0 tma             optional per path: copies enqueued while
 *                                  the stream captures a graph (no host
 *                                  launch cost at replay); absent = copy's
 *     batch 0 tma                  batches of 2 or more pieces, by mean
 *     batch 64M ce                 piece bytes
 *     batch h2d 0 tma              optional: batches whose first piece with
 *     batch d2h 0 tma              bytes is h2d (d2h); absent = batch's
 *     link h2d 8                   optional: the CTAs that saturate the
 *     link d2h 2                   host link in each direction, and a peer
 *     link peer 32                 link; a kernel moving only pieces that
 *                                  cross such links launches no more
 *                                  (absent: no cap)
 *
 * A list's first band starts at 0 and each next one at a larger size (a
 * decimal number with an optional K, M or G suffix, binary). Sizes from a
 * band's start up to the next band's start go to its engine. The h2d and
 * d2h lists are optional in format 1, so a table written before they
 * existed reads and routes as it did.
 */
#ifndef P2PT_AUTO_TABLE_H
#define P2PT_AUTO_TABLE_H

#include "common.h"
#include "request.h" /* P2PT_LINK_*, the links a table caps */

#define P2PT_AUTO_FORMAT 1          /* the version `p2pt-auto` must give */
#define P2PT_AUTO_MAX_BANDS 16      /* bands per list */
#define P2PT_AUTO_MAX_TEXT (64 * 1024) /* largest table file */
#define P2PT_AUTO_MAX_LINE 255      /* longest line, without its newline */

/* The table's paths. The first P2PT_AUTO_GPU_PATHS follow enum p2pt_path
 * (request.h), and the router checks the order at compile time; every
 * table has their copy lists. h2d and d2h are copies between pinned host
 * memory mapped in the stream's context and the stream's device: the
 * request calls them `other` (as it does pageable memory), and the auto
 * policy tells them apart from the resolved sides. */
enum {
    P2PT_AUTO_LOCAL,
    P2PT_AUTO_PUSH,
    P2PT_AUTO_PULL,
    P2PT_AUTO_H2D,
    P2PT_AUTO_D2H,
    P2PT_AUTO_PATHS
};
#define P2PT_AUTO_GPU_PATHS 3  /* local, push, pull: required */
#define P2PT_AUTO_HOST_PATHS 2 /* h2d, d2h: optional */
/* The index of host path `p` (P2PT_AUTO_H2D or _D2H) in host_batch[]. */
#define P2PT_AUTO_HOST_INDEX(p) ((p) - P2PT_AUTO_H2D)
P2PT_INTERNAL extern const char *const p2pt__auto_path_names[P2PT_AUTO_PATHS];

struct p2pt_auto_band {
    uint64_t from;   /* first size (bytes) of the band */
    uint32_t engine; /* index into the engine names the table was parsed with */
};

struct p2pt_auto_list {
    uint32_t n; /* 0: absent (only graph lists may be) */
    struct p2pt_auto_band band[P2PT_AUTO_MAX_BANDS];
};

struct p2pt_auto_table {
    int cc;                                       /* e.g. 90 for sm_90 */
    char device[96];                              /* `device` line, "" if none */
    char source[256];                             /* the file, or "built-in ..." */
    /* local, push, pull required; h2d, d2h n == 0: the fallback engine */
    struct p2pt_auto_list copy[P2PT_AUTO_PATHS];
    struct p2pt_auto_list graph[P2PT_AUTO_PATHS]; /* n == 0: use copy[] */
    struct p2pt_auto_list batch;                  /* required */
    /* `batch h2d`, `batch d2h`; n == 0: use batch */
    struct p2pt_auto_list host_batch[P2PT_AUTO_HOST_PATHS];
    /* `link h2d`, `link d2h`: CTAs that saturate the host link; `link
     * peer`: a peer link (NVLink); 0: no cap. Indexed as request.h's
     * P2PT_LINK_* */
    uint32_t link[P2PT_LINKS];
};

/*
 * Parse `len` bytes of table text. `source` names it in messages (a file
 * path, or "built-in sm_90"); `engines` are the names an engine may have
 * (their index is stored). Fails with P2PT_INVALID_ARGUMENT and a message
 * "SOURCE:LINE: what is wrong (got 'VALUE'; expected ...)" for: a missing or
 * unknown first item or version, an unknown item, a bad or missing field,
 * trailing fields, an unknown path or engine (the engines are listed), a size
 * that is not a number, a first band that does not start at 0, a band that
 * does not start after the one before, more than P2PT_AUTO_MAX_BANDS bands,
 * `arch` or `device` given twice, a line over P2PT_AUTO_MAX_LINE, a NUL byte,
 * `graph h2d` (d2h) bands without `copy h2d` (d2h) bands (on the graph
 * list's last line); and (line 0, i.e. "SOURCE: ...") a missing `arch`,
 * `copy local`, `push` or `pull`, or `batch`.
 * `out` is written only on success.
 */
P2PT_INTERNAL p2pt_status p2pt__auto_table_parse(const char *text, size_t len,
                                                 const char *source,
                                                 const char *const *engines, int n_engines,
                                                 struct p2pt_auto_table *out);
/* Read the file at `path` (at most P2PT_AUTO_MAX_TEXT bytes) and parse it
 * with `path` as its source. An unreadable, empty or oversized file is
 * P2PT_INVALID_ARGUMENT naming the path and the reason. */
P2PT_INTERNAL p2pt_status p2pt__auto_table_load(const char *path, const char *const *engines,
                                                int n_engines, struct p2pt_auto_table *out);
/*
 * Write `t` as table text that p2pt__auto_table_parse reads back to the same
 * table (sizes with a K/M/G suffix where exact). Returns the length it
 * needed (snprintf-style: truncated when >= len).
 */
P2PT_INTERNAL size_t p2pt__auto_table_format(const struct p2pt_auto_table *t,
                                             const char *const *engines, char *buf,
                                             size_t len);
/* The index of the list's band holding `bytes` (0 for an empty list). */
static inline uint32_t p2pt__auto_band_of(const struct p2pt_auto_list *l, uint64_t bytes)
{
    uint32_t i = l->n;
    while (i > 1 && l->band[i - 1].from > bytes)
        i--;
    return i > 0 ? i - 1 : 0;
}
/* The engine index of the band holding `bytes` (l->n >= 1). */
static inline uint32_t p2pt__auto_pick(const struct p2pt_auto_list *l, uint64_t bytes)
{
    return l->band[p2pt__auto_band_of(l, bytes)].engine;
}
/* Bytes as tables and reasons write them: with the largest K, M or G
 * suffix that divides them exactly, else plain decimal. Returns buf. */
P2PT_INTERNAL const char *p2pt__auto_size_text(uint64_t v, char buf[24]);

/*
 * Build a list from measurements (p2pt-bench --mode calibrate): `n` sizes
 * in increasing order and, for each, the time of every engine
 * (time[i * n_engines + e], any unit; <= 0 = not measured, never picked).
 * Each size goes to its fastest engine, except that an engine within `tie`
 * (a fraction, e.g. 0.02) of the fastest keeps the previous size's engine,
 * so noise does not cut bands. Where the winner changes between sizes a and
 * b, the new band starts at their geometric mean, rounded up to 4 KiB.
 * P2PT_INVALID_ARGUMENT when n is 0, sizes are not increasing, a size has no
 * measured engine, or more than P2PT_AUTO_MAX_BANDS bands result.
 */
P2PT_INTERNAL p2pt_status p2pt__auto_list_build(struct p2pt_auto_list *out,
                                                const uint64_t *sizes, int n,
                                                const double *time, int n_engines,
                                                double tie);

/* A built-in table: text in the file format, for an architecture and, when
 * `device` is not NULL, GPUs whose name contains it (the first entry of an
 * architecture is its default). NULL-ended (auto_defaults.c). */
struct p2pt_auto_builtin {
    int cc;
    const char *device;
    const char *text;
};
P2PT_INTERNAL extern const struct p2pt_auto_builtin p2pt__auto_builtins[];
/* The built-in table a GPU of compute capability `cc` named `name` uses:
 * the first entry of that architecture whose device filter the name
 * contains, else the architecture's first entry; NULL when none. */
P2PT_INTERNAL const struct p2pt_auto_builtin *p2pt__auto_builtin_for(int cc, const char *name);

#endif /* P2PT_AUTO_TABLE_H */
