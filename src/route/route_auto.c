/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `auto` policy: not an engine of its own but a choice, per copy and
 * per batch, between the registered ones, from a crossover table
 * (auto_table.h) for the stream's GPU architecture. Read top to bottom:
 * loading the tables at init (a file, or the built-in ones), checking them
 * against the machine, the table of one device, then the two decisions,
 * each able to say why in words (p2pt_explain_copy/_batch).
 *
 * The hot path is a per-device pointer load, a walk over at most 16 bands
 * and the chosen transport's can_copy. The facts it reads beyond a copy's
 * own (the stream's capture state; a host batch's first piece, located)
 * are gathered by resolve because the policy asks for them (needs), so
 * routing asks the driver nothing but, once per device, its architecture.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto.h"
#include "auto_table.h"
#include "driver.h"
#include "handle.h"
#include "policy.h"
#include "router.h"

/* A request's local, push and pull index the table's lists as they are;
 * h2d and d2h are found from the sides of a request on path `other`. */
_Static_assert(P2PT_AUTO_LOCAL == (int)P2PT_PATH_LOCAL && P2PT_AUTO_PUSH == (int)P2PT_PATH_PUSH &&
                   P2PT_AUTO_PULL == (int)P2PT_PATH_PULL &&
                   P2PT_AUTO_GPU_PATHS == (int)P2PT_PATH_OTHER,
               "auto_table.h's paths between GPUs follow enum p2pt_path");
_Static_assert(P2PT_AUTO_D2H - P2PT_AUTO_H2D == P2PT_LINK_D2H - P2PT_LINK_H2D &&
                   P2PT_LINK_H2D == 0,
               "auto_table.h's h2d and d2h follow request.h's link directions");

#define MAX_BUILTINS 8

struct p2pt_auto {
    const char *engines[P2PT_MAX_TRANSPORTS];
    int n_engines;
    bool has_file;
    struct p2pt_auto_table file;
    int n_builtin;
    struct p2pt_auto_table builtin[MAX_BUILTINS]; /* p2pt__auto_builtins, parsed, in order */
    struct p2pt_auto_table none;                  /* an architecture without a table: ce */
    /* The table each device uses, found on its first request. */
    const struct p2pt_auto_table *_Atomic dev[P2PT_MAX_DEVICES];
};

/* A table may name only engines that run on its architecture. */
static p2pt_status check_engines(const struct p2pt_auto_table *t)
{
    const struct p2pt_auto_list *lists[2 * P2PT_AUTO_PATHS + 1 + P2PT_AUTO_HOST_PATHS];
    int n = 0;
    for (int p = 0; p < P2PT_AUTO_PATHS; p++) {
        lists[n++] = &t->copy[p];
        lists[n++] = &t->graph[p];
    }
    lists[n++] = &t->batch;
    for (int i = 0; i < P2PT_AUTO_HOST_PATHS; i++)
        lists[n++] = &t->host_batch[i];
    for (int i = 0; i < n; i++)
        for (uint32_t b = 0; b < lists[i]->n; b++) {
            const struct p2pt_transport *e = p2pt__transport_at((int)lists[i]->band[b].engine);
            if (e->min_cc > t->cc)
                return p2pt__fail(P2PT_INVALID_ARGUMENT,
                                  "%s: engine %s needs sm_%d or newer, and this table is "
                                  "for sm_%d (its 'arch' line)",
                                  t->source, e->name, e->min_cc, t->cc);
        }
    return P2PT_SUCCESS;
}

p2pt_status p2pt__auto_load(const struct p2pt_config *cfg, struct p2pt_auto **out)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_auto *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory for the auto tables");
    a->n_engines = p2pt__engine_names(a->engines, P2PT_MAX_TRANSPORTS);
    for (int i = 0; p2pt__auto_builtins[i].text != NULL; i++) {
        const struct p2pt_auto_builtin *b = &p2pt__auto_builtins[i];
        char source[64];
        if (i == MAX_BUILTINS) {
            st = p2pt__fail(P2PT_INTERNAL_ERROR, "more than %d built-in auto tables; raise "
                                                 "MAX_BUILTINS", MAX_BUILTINS);
            goto out;
        }
        snprintf(source, sizeof(source), "built-in table %d (sm_%d%s%s)", i, b->cc,
                 b->device ? ", " : "", b->device ? b->device : "");
        P2PT_TRY(p2pt__auto_table_parse(b->text, strlen(b->text), source, a->engines,
                                        a->n_engines, &a->builtin[i]));
        a->n_builtin = i + 1;
    }
    if (cfg->auto_table[0] != '\0') {
        st = p2pt__auto_table_load(cfg->auto_table, a->engines, a->n_engines, &a->file);
        if (st != P2PT_SUCCESS) {
            /* The loader names the path; the reader also needs the variable
             * that chose it, which may have been set far from the program. */
            char why[1024];
            snprintf(why, sizeof(why), "%s", p2pt__last_error_text());
            st = p2pt__fail(st, "P2P_TRANSPORT_AUTO_TABLE=%s", why);
            goto out;
        }
        P2PT_TRY(check_engines(&a->file));
        a->has_file = true;
    }
    /* Everything to the engine that runs any request (the h2d and d2h
     * lists stay empty: the fallback engine). */
    uint32_t fallback = (uint32_t)p2pt__transport_index(p2pt__fallback_engine());
    snprintf(a->none.source, sizeof(a->none.source),
             "no table for this architecture: everything to %s", a->engines[fallback]);
    for (int p = 0; p < P2PT_AUTO_GPU_PATHS; p++) {
        a->none.copy[p].n = 1;
        a->none.copy[p].band[0].engine = fallback;
    }
    a->none.batch.n = 1;
    a->none.batch.band[0].engine = fallback;
    *out = a;
    a = NULL;
out:
    free(a);
    return st;
}

void p2pt__auto_free(struct p2pt_auto *a)
{
    free(a);
}

/* The device's compute capability and name. */
static p2pt_status device_facts(int ordinal, int *cc, char *name, int len)
{
    p2pt_status st = P2PT_SUCCESS;
    CUdevice dev;
    int major = 0, minor = 0;
    P2PT_CU(p2pt__cu.cuDeviceGet(&dev, ordinal));
    P2PT_CU(p2pt__cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                          dev));
    P2PT_CU(p2pt__cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                          dev));
    P2PT_CU(p2pt__cu.cuDeviceGetName(name, len, dev));
    *cc = major * 10 + minor;
out:
    return st;
}

p2pt_status p2pt__auto_check_machine(struct p2pt_handle *h)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_auto *a = h->policy_state;
    char text[4096], name[96] = "", first[160] = "";
    int count = 0;

    if (a->has_file) {
        P2PT_CU(p2pt__cu.cuDeviceGetCount(&count));
        bool match = count == 0;
        for (int d = 0; d < count && !match; d++) {
            int cc = 0;
            P2PT_TRY(device_facts(d, &cc, name, (int)sizeof(name)));
            match = cc == a->file.cc;
            if (d == 0)
                snprintf(first, sizeof(first), "device 0 (%s) is sm_%d", name, cc);
        }
        if (!match) {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "P2P_TRANSPORT_AUTO_TABLE=%s: the table is for sm_%d (its 'arch' "
                            "line), and none of the %d visible GPUs is: %s; measure this "
                            "machine with p2pt-bench --mode calibrate",
                            a->file.source, a->file.cc, count, first);
            goto out;
        }
        p2pt__auto_table_format(&a->file, a->engines, text, sizeof(text));
        P2PT_INFO(&h->log, "auto: crossover table %s%s%s for sm_%d GPUs:\n%s", a->file.source,
                  a->file.device[0] ? ", measured on " : "", a->file.device, a->file.cc, text);
    }
    for (int i = 0; i < a->n_builtin; i++) {
        if (a->has_file && a->builtin[i].cc == a->file.cc)
            continue;
        p2pt__auto_table_format(&a->builtin[i], a->engines, text, sizeof(text));
        P2PT_INFO(&h->log, "auto: %s:\n%s", a->builtin[i].source, text);
    }
out:
    return st;
}

/* The table device `ordinal` uses: the file's for its architecture, else the
 * built-in one for its name, else its architecture's first, else `none`. */
static p2pt_status device_table(struct p2pt_handle *h, int ordinal,
                                const struct p2pt_auto_table **out)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_auto *a = h->policy_state;
    char name[96] = "";
    int cc = 0;
    bool cached = ordinal >= 0 && ordinal < P2PT_MAX_DEVICES;

    if (cached && (*out = atomic_load_explicit(&a->dev[ordinal], memory_order_acquire)) != NULL)
        return P2PT_SUCCESS;
    P2PT_TRY(device_facts(ordinal, &cc, name, (int)sizeof(name)));
    const struct p2pt_auto_builtin *b = p2pt__auto_builtin_for(cc, name);
    const struct p2pt_auto_table *t = &a->none;
    if (a->has_file && a->file.cc == cc)
        t = &a->file;
    else if (b != NULL)
        t = &a->builtin[b - p2pt__auto_builtins];
    P2PT_INFO(&h->log, "auto: device %d (%s, sm_%d) uses %s", ordinal, name, cc, t->source);
    if (cached)
        atomic_store_explicit(&a->dev[ordinal], t, memory_order_release);
    *out = t;
out:
    return st;
}

/* Per process and device: the built-in table's link CTAs, 20 bits each
 * (h2d, d2h, peer from the low end; a table caps them at 4096), with bit
 * 63 set once known. */
static _Atomic uint64_t builtin_link[P2PT_MAX_DEVICES];

p2pt_status p2pt__auto_builtin_link_ctas(int ordinal, uint32_t out[P2PT_LINKS])
{
    p2pt_status st = P2PT_SUCCESS;
    char name[96] = "";
    int cc = 0;
    const char *engines[P2PT_MAX_TRANSPORTS];
    struct p2pt_auto_table *t = NULL;
    bool cached = ordinal >= 0 && ordinal < P2PT_MAX_DEVICES;
    uint64_t v = cached ? atomic_load_explicit(&builtin_link[ordinal], memory_order_relaxed) : 0;

    for (int i = 0; i < P2PT_LINKS; i++)
        out[i] = v >> 63 ? (uint32_t)(v >> (20 * i)) & 0xfffffu : 0;
    if (v >> 63)
        return P2PT_SUCCESS;
    P2PT_TRY(device_facts(ordinal, &cc, name, (int)sizeof(name)));
    const struct p2pt_auto_builtin *b = p2pt__auto_builtin_for(cc, name);
    if (b != NULL) {
        if ((t = malloc(sizeof(*t))) == NULL) {
            st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
            goto out;
        }
        int n = p2pt__engine_names(engines, P2PT_MAX_TRANSPORTS);
        P2PT_TRY(p2pt__auto_table_parse(b->text, strlen(b->text), "built-in table", engines, n,
                                        t));
        for (int i = 0; i < P2PT_LINKS; i++)
            out[i] = t->link[i];
    }
    if (cached) {
        v = 1ull << 63;
        for (int i = 0; i < P2PT_LINKS; i++)
            v |= (uint64_t)out[i] << (20 * i);
        atomic_store_explicit(&builtin_link[ordinal], v, memory_order_relaxed);
    }
out:
    free(t);
    return st;
}

static p2pt_status auto_link_ctas(struct p2pt_handle *h, int device, uint32_t out[P2PT_LINKS])
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_auto_table *tab = NULL;
    P2PT_TRY(device_table(h, device, &tab));
    for (int i = 0; i < P2PT_LINKS; i++)
        out[i] = tab->link[i];
out:
    return st;
}

/* "'copy local' from 256K: tma" for the band of `l` holding `bytes`. */
static void band_text(const struct p2pt_auto *a, const char *list, const struct p2pt_auto_list *l,
                      uint64_t bytes, char *buf, size_t len)
{
    char from[24], to[48] = "";
    uint32_t b = p2pt__auto_band_of(l, bytes);
    if (b + 1 < l->n) {
        char next[24];
        snprintf(to, sizeof(to), " to %s", p2pt__auto_size_text(l->band[b + 1].from, next));
    }
    snprintf(buf, len, "'%s' band from %s%s: %s", list,
             p2pt__auto_size_text(l->band[b].from, from), to, a->engines[l->band[b].engine]);
}

/*
 * The table's path of a resolved request: its own for local, push and pull;
 * for `other`, h2d when the source is pinned host memory mapped in the
 * stream's context and the destination on the stream's device, d2h the
 * reverse; -1 for the rest of `other` (pageable memory, host to host,
 * neither side on the stream's device), which no table lists.
 */
static int table_path(const struct p2pt_request *r)
{
    if (r->path != P2PT_PATH_OTHER)
        return (int)r->path;
    int dir = p2pt__link_dir(&r->dst_side, &r->src_side, r->device);
    return dir < 0 ? -1 : P2PT_AUTO_H2D + dir - P2PT_LINK_H2D;
}

/* Memory only the copy engine moves (P2PT_REACH_UNMAPPED: another
 * device's memory not mapped for the stream's, such as a CUDA IPC handle
 * opened in another device's context) goes to it, whatever the table says:
 * a kernel cannot touch it, and the driver moves it at the speed it gives.
 * Says so into why. */
static bool ce_only(const struct p2pt_side *dst, const struct p2pt_side *src, int device,
                    char *why, size_t len)
{
    const struct p2pt_side *s = dst->reach == P2PT_REACH_UNMAPPED ? dst
                                : src->reach == P2PT_REACH_UNMAPPED ? src
                                                                    : NULL;
    if (s == NULL)
        return false;
    if (why)
        snprintf(why, len, "auto: %s is memory of device %d %s, not mapped for device %d, where "
                           "the stream runs: no kernel there can reach it, and the copy engine "
                           "moves it: %s",
                 s == dst ? "dst" : "src", s->device,
                 s->opened_elsewhere ? "opened in its own context (a CUDA IPC handle)"
                                     : "without peer access",
                 device, p2pt__fallback_engine()->name);
    return true;
}

/* The table's engine for a resolved copy; the router applies its can_copy
 * and the fallback. A path without a list (the rest of `other`, or h2d and
 * d2h in a table without them) goes to the fallback engine, which stages
 * what the GPU cannot map. */
static p2pt_status auto_copy(struct p2pt_handle *h, const struct p2pt_request *r,
                             const struct p2pt_transport **t, char *why, size_t len)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_auto *a = h->policy_state;
    const struct p2pt_auto_table *tab = NULL;
    char band[160] = "", size[24], name[16];
    int p = table_path(r);

    if (ce_only(&r->dst_side, &r->src_side, r->device, why, len)) {
        *t = p2pt__fallback_engine();
        return P2PT_SUCCESS;
    }
    if (p >= 0)
        P2PT_TRY(device_table(h, r->device, &tab));
    if (p < 0 || tab->copy[p].n == 0) {
        *t = p2pt__fallback_engine();
        if (why && p < 0)
            snprintf(why, len, "auto: pageable or host-to-host memory, or neither side on the "
                               "stream's device (path other): %s, which stages what the GPU "
                               "cannot map",
                     (*t)->name);
        else if (why)
            snprintf(why, len, "auto: %s copy of %s bytes; table %s has no 'copy %s' list: %s, "
                               "the fallback engine",
                     p2pt__auto_path_names[p], p2pt__auto_size_text(r->bytes, size), tab->source,
                     p2pt__auto_path_names[p], (*t)->name);
        return P2PT_SUCCESS;
    }
    const struct p2pt_auto_list *l = &tab->copy[p];
    const char *list = "copy";
    uint32_t e = p2pt__auto_pick(l, r->bytes);
    const struct p2pt_auto_list *g = &tab->graph[p];
    if (g->n != 0 && p2pt__auto_pick(g, r->bytes) != e) {
        if (r->capturing) {
            l = g;
            list = "graph";
            e = p2pt__auto_pick(l, r->bytes);
        }
    }
    *t = p2pt__transport_at((int)e);
    if (why) {
        snprintf(name, sizeof(name), "%s %s", list, p2pt__auto_path_names[p]);
        band_text(a, name, l, r->bytes, band, sizeof(band));
        snprintf(why, len, "auto: %s copy of %s bytes%s; table %s: %s", p2pt__auto_path_names[p],
                 p2pt__auto_size_text(r->bytes, size),
                 l == g ? " into a graph being captured" : "", tab->source, band);
    }
out:
    return st;
}

/*
 * The table's path of a host batch, for its `batch h2d` and `batch d2h`
 * lists: the first piece with bytes stands for it (resolved as a copy,
 * b->first). The engines run any mix of pieces; this only picks the list.
 */
static int batch_path(const struct p2pt_batch *b)
{
    return b->first.bytes != 0 ? table_path(&b->first) : -1;
}

/* Does every band of `l` name the same engine? Then the mean piece size
 * cannot change the choice. */
static bool one_engine(const struct p2pt_auto_list *l)
{
    for (uint32_t i = 1; i < l->n; i++)
        if (l->band[i].engine != l->band[0].engine)
            return false;
    return true;
}

/* The table's engine for a host batch, by its mean piece size: from the
 * `batch h2d` (`d2h`) list when the table has one and the batch's first
 * piece is h2d (d2h), else from the `batch` list. The mean of descriptors
 * is known only after the pass over them: before it, where the list's
 * bands name more than one engine, the first piece's band names the likely
 * engine and the choice waits for the pass (b->route_later). So does a
 * kernel engine's under validation, unless the blocks' layers showed every
 * piece mapped: a piece only the copy engine moves, which the pass finds,
 * sends the batch there. */
static p2pt_status auto_batch(struct p2pt_handle *h, struct p2pt_batch *b,
                              const struct p2pt_transport **t, char *why, size_t len)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_auto_table *tab = NULL;
    char band[160], mean[24], first[96] = "", name[16] = "batch";
    int p = -1;

    /* A piece only the copy engine moves: the first (resolved for routing),
     * or the first the pass found (b->unmapped). */
    const bool by_first = b->first.bytes != 0 &&
                          ce_only(&b->first.dst_side, &b->first.src_side, b->device, why, len);
    if (by_first || b->unmapped) {
        *t = p2pt__fallback_engine();
        if (why && !by_first)
            snprintf(why, len, "auto: a piece of the batch is memory of another device not "
                               "mapped for device %d, where the stream runs (a CUDA IPC handle "
                               "opened in another context, or no peer access): no kernel there "
                               "can reach it, and the copy engine moves it: %s",
                     b->device, (*t)->name);
        return P2PT_SUCCESS;
    }
    P2PT_TRY(device_table(h, b->device, &tab));
    if (tab->host_batch[0].n != 0 || tab->host_batch[1].n != 0)
        p = batch_path(b);
    const struct p2pt_auto_list *l = &tab->batch;
    if (p >= P2PT_AUTO_H2D) {
        const char *pn = p2pt__auto_path_names[p];
        const struct p2pt_auto_list *hl = &tab->host_batch[P2PT_AUTO_HOST_INDEX(p)];
        if (hl->n != 0) {
            l = hl;
            snprintf(name, sizeof(name), "batch %s", pn);
            snprintf(first, sizeof(first), ", the first %s", pn);
        } else {
            snprintf(first, sizeof(first), ", the first %s (the table has no 'batch %s' list)",
                     pn, pn);
        }
    }
    const bool sums = b->passed || b->sums_known;
    const uint64_t m = sums ? (b->pieces ? b->bytes / b->pieces : 0) : (uint64_t)b->first.bytes;
    *t = p2pt__transport_at((int)l->band[p2pt__auto_band_of(l, m)].engine);
    if (!b->passed)
        b->route_later = (!sums && !one_engine(l)) ||
                         (((*t)->caps & P2PT_CAP_STAGED) == 0 && h->cfg.validate && !b->mapped);
    if (why == NULL)
        return P2PT_SUCCESS;
    /* Where the choice waits for the pass, these words stand only if
     * nothing after it chooses (the SM budget); the route after the pass
     * writes its own. */
    band_text(h->policy_state, name, l, m, band, sizeof(band));
    if (sums)
        snprintf(why, len, "auto: batch of %zu pieces, mean %s bytes%s; table %s: %s", b->pieces,
                 p2pt__auto_size_text(m, mean), first, tab->source, band);
    else if (one_engine(l))
        snprintf(why, len, "auto: batch of %zu descriptors, any mean%s; table %s: %s", b->count,
                 first, tab->source, band);
    else
        snprintf(why, len, "auto: batch of %zu descriptors, mean taken as %s bytes (one "
                 "piece's, until the pass over them finds it)%s; table %s: %s", b->count,
                 p2pt__auto_size_text(m, mean), first, tab->source, band);
out:
    return st;
}

/* The first engine that reads descriptors from GPU memory: a device batch's
 * pieces are unknown on the host, so no table applies. */
static p2pt_status auto_device_batch(struct p2pt_handle *h, const char *fn,
                                     const struct p2pt_transport **t, char *why, size_t len)
{
    (void)h;
    *t = p2pt__engine_with(P2PT_CAP_DEVICE_BATCH);
    if (*t == NULL)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "%s: no registered transport reads "
                          "descriptors from GPU memory", fn);
    if (why)
        snprintf(why, len, "auto: a device batch: %s, the first engine that reads "
                           "descriptors from GPU memory",
                 (*t)->name);
    return P2PT_SUCCESS;
}

static p2pt_status auto_prepare(struct p2pt_handle *h, int device)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_auto_table *tab = NULL;
    P2PT_TRY(device_table(h, device, &tab));
    /* Every engine the device's architecture runs (the `none` table's cc
     * is 0: the copy engine alone): a table may send any size to either,
     * and a graph needs each one's kernels loaded before capture. */
    for (int i = 0; p2pt__transport_at(i) != NULL; i++)
        if (p2pt__transport_at(i)->min_cc <= tab->cc)
            P2PT_TRY(p2pt__transport_at(i)->prepare(h, device));
out:
    return st;
}

static p2pt_status auto_init(const struct p2pt_handle *h, void **state)
{
    struct p2pt_auto *a = NULL;
    p2pt_status st = p2pt__auto_load(&h->cfg, &a);
    *state = a;
    return st;
}

static void auto_fini(void *state)
{
    p2pt__auto_free(state);
}

static const char *auto_name(const struct p2pt_handle *h)
{
    (void)h;
    return P2PT_AUTO_NAME;
}

/* A table file is reported by the configuration; without one, auto says
 * it routes by its built-in tables. */
static void auto_report(const struct p2pt_handle *h, p2pt_properties *p)
{
    (void)h;
    if (p->auto_table == NULL)
        p->auto_table = "built-in";
}

const struct p2pt_policy p2pt__policy_auto = {
    .name = P2PT_AUTO_NAME,
    /* the batch table is by mean piece size; graph bands and h2d/d2h
     * batch lists by the stream and the first piece */
    .needs = P2PT_NEEDS_CAPTURE | P2PT_NEEDS_FIRST_PIECE,
    .init = auto_init,
    .fini = auto_fini,
    .after_driver = p2pt__auto_check_machine,
    .link_ctas = auto_link_ctas,
    .transport_name = auto_name,
    .report = auto_report,
    .route_copy = auto_copy,
    .route_batch = auto_batch,
    .route_device_batch = auto_device_batch,
    .prepare = auto_prepare,
};
