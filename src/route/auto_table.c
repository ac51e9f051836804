/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The crossover table of `auto` as text (auto_table.h gives the format):
 * read strictly, because a table that reads differently from what its
 * writer meant sends copies to the slower engine with no error to show for
 * it. Every complaint names the source, the line, the value and what was
 * expected, so a hand-edited file is fixed from the message alone. Written
 * back by p2pt__auto_table_format, which `p2pt-bench --mode calibrate` uses,
 * so the writer and the reader share one format. CUDA-free.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auto_table.h"
#include "config.h"

const char *const p2pt__auto_path_names[P2PT_AUTO_PATHS] = {"local", "push", "pull", "h2d",
                                                             "d2h"};

#define WS " \t\r\v\f"
/* Largest band start: far beyond any copy, and every value up to it is
 * written back exactly (4294967296G at most). */
#define MAX_FROM (1ull << 62)
#define ITEMS "p2pt-auto, arch, device, copy, graph, batch or link"
#define PATHS "local, push, pull, h2d or d2h"
/* Where each list's last band was read (struct parser's last[]). */
#define LAST_COPY(p) (p)
#define LAST_GRAPH(p) (P2PT_AUTO_PATHS + (p))
#define LAST_BATCH (2 * P2PT_AUTO_PATHS)
#define LAST_HOST_BATCH(i) (2 * P2PT_AUTO_PATHS + 1 + (i))
#define N_LISTS (2 * P2PT_AUTO_PATHS + 1 + P2PT_AUTO_HOST_PATHS)

/* Where the parse is, for messages: line 0 is the text as a whole. */
struct parser {
    const char *source;
    size_t line;
    const char *const *engines;
    int n_engines;
    size_t given[3];                    /* line of p2pt-auto, arch, device; 0: none yet */
    size_t last[N_LISTS];               /* line of each list's last band; 0: none */
    size_t link_line[P2PT_LINKS];       /* line of each link item; 0: none yet */
};

static p2pt_status bad(const struct parser *ps, const char *fmt, ...) P2PT_PRINTF(2, 3);
static p2pt_status bad(const struct parser *ps, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (ps->line == 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: %s", ps->source, what);
    return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s:%zu: %s", ps->source, ps->line, what);
}

/* The engine an example in a message shows: the first the caller named
 * (the registry's first), or a placeholder when it named none. */
static const char *example_engine(const struct parser *ps)
{
    return ps->n_engines > 0 ? ps->engines[0] : "ENGINE";
}

/* The next whitespace-separated token of *p, terminated in place; NULL when
 * none is left. */
static char *token(char **p)
{
    char *s = *p + strspn(*p, WS);
    if (*s == '\0') {
        *p = s;
        return NULL;
    }
    char *e = s + strcspn(s, WS);
    if (*e != '\0')
        *e++ = '\0';
    *p = e;
    return s;
}

static p2pt_status no_more(const struct parser *ps, char **p, const char *after)
{
    const char *extra = token(p);
    if (extra != NULL)
        return bad(ps, "trailing field (got '%s'; expected nothing after %s)", extra, after);
    return P2PT_SUCCESS;
}

/* Bytes as the table writes them: with the largest K, M or G suffix that is
 * exact, else plain decimal. */
const char *p2pt__auto_size_text(uint64_t v, char buf[24])
{
    static const struct {
        unsigned shift;
        char suffix;
    } units[] = {{30, 'G'}, {20, 'M'}, {10, 'K'}};
    for (size_t i = 0; i < P2PT_ARRAY_LEN(units); i++) {
        if (v != 0 && v % (1ull << units[i].shift) == 0) {
            snprintf(buf, 24, "%llu%c", (unsigned long long)(v >> units[i].shift),
                     units[i].suffix);
            return buf;
        }
    }
    snprintf(buf, 24, "%llu", (unsigned long long)v);
    return buf;
}

/* "SIZE ENGINE" of a band of list `l` (index `list` in ps->last), named
 * `what` in messages ("copy local", "batch"); `size` is the first of the
 * two tokens, already taken (NULL: none), the engine is read from *p. */
static p2pt_status read_band(struct parser *ps, char **p, const char *size, const char *what,
                             struct p2pt_auto_list *l, int list)
{
    char names[512] = "", prev[24];
    unsigned long long from;
    if (size == NULL)
        return bad(ps, "missing size (got ''; expected a size and an engine after '%s', "
                       "e.g. '%s 4M %s')",
                   what, what, example_engine(ps));
    if (!p2pt__parse_size(size, &from) || from > MAX_FROM)
        return bad(ps, "not a size (got '%s'; expected bytes: a decimal number with an "
                       "optional K, M or G suffix, at most 2^62)",
                   size);
    const char *engine = token(p);
    int e = 0;
    while (engine != NULL && e < ps->n_engines && strcasecmp(engine, ps->engines[e]) != 0)
        e++;
    if (engine == NULL || e == ps->n_engines) {
        for (int i = 0, used = 0; i < ps->n_engines && used < (int)sizeof(names); i++)
            used += snprintf(names + used, sizeof(names) - (size_t)used, "%s%s", i ? ", " : "",
                             ps->engines[i]);
        return bad(ps, "%s engine (got '%s'; expected one of: %s (any case))",
                   engine ? "unknown" : "missing", engine ? engine : "", names);
    }
    p2pt_status st = no_more(ps, p, "the engine");
    if (st != P2PT_SUCCESS)
        return st;
    if (l->n == 0 && from != 0)
        return bad(ps, "the first '%s' band must start at 0 (got '%s'; expected 0)", what, size);
    if (l->n > 0 && from <= l->band[l->n - 1].from)
        return bad(ps, "'%s' band does not start after the one on line %zu (got '%s'; "
                       "expected more than %s)",
                   what, ps->last[list], size, p2pt__auto_size_text(l->band[l->n - 1].from, prev));
    if (l->n == P2PT_AUTO_MAX_BANDS)
        return bad(ps, "too many '%s' bands (got '%s', band %d; expected at most %d per list)",
                   what, size, P2PT_AUTO_MAX_BANDS + 1, P2PT_AUTO_MAX_BANDS);
    l->band[l->n].from = from;
    l->band[l->n].engine = (uint32_t)e;
    l->n++;
    ps->last[list] = ps->line;
    return P2PT_SUCCESS;
}

/* `arch sm_XY`: sm_ and 2 or 3 digits without a leading 0 (major * 10 +
 * minor), the form nvcc and NVRTC name architectures in, so that every cc
 * is written back the same way. */
static p2pt_status read_arch(const struct parser *ps, char **p, int *cc)
{
    const char *v = token(p);
    size_t digits = v ? strspn(v + (strncmp(v, "sm_", 3) == 0 ? 3 : 0), "0123456789") : 0;
    if (v == NULL || strncmp(v, "sm_", 3) != 0 || (digits != 2 && digits != 3) ||
        v[3 + digits] != '\0' || v[3] == '0')
        return bad(ps, "not an architecture (got '%s'; expected sm_ and 2 or 3 digits, "
                       "e.g. sm_90, sm_100, sm_120)",
                   v ? v : "");
    *cc = atoi(v + 3);
    return no_more(ps, p, "the architecture");
}

/* `device NAME`: the rest of the line, trimmed, spaces kept. */
static p2pt_status read_device(const struct parser *ps, char *rest, char dst[96])
{
    rest += strspn(rest, WS);
    size_t n = strlen(rest);
    while (n > 0 && strchr(WS, rest[n - 1]) != NULL)
        n--;
    if (n == 0 || n > 95)
        return bad(ps, "%s (got '%.*s%s'; expected the GPU's name, 1 to 95 characters)",
                   n ? "device name too long" : "missing device name", n > 40 ? 40 : (int)n,
                   rest, n > 40 ? "..." : "");
    memcpy(dst, rest, n);
    dst[n] = '\0';
    return P2PT_SUCCESS;
}

/* One line's item: `item` its first token, the rest at *p. */
static p2pt_status read_item(struct parser *ps, struct p2pt_auto_table *t, const char *item,
                             char **p)
{
    static const char *const once[] = {"p2pt-auto", "arch", "device"};
    char what[24], expected[16];
    int k = 0, path;
    while (k < 3 && strcmp(item, once[k]) != 0)
        k++;
    if (ps->given[0] == 0 && k != 0)
        return bad(ps, "the first item must be the format line (got '%s'; expected "
                       "'p2pt-auto %d')",
                   item, P2PT_AUTO_FORMAT);
    if (k < 3) {
        if (ps->given[k] != 0)
            return bad(ps, "'%s' given twice (got a second '%s' line; expected one, the one "
                           "on line %zu)",
                       item, item, ps->given[k]);
        ps->given[k] = ps->line;
    }
    switch (k) {
    case 0: {
        const char *v = token(p);
        snprintf(expected, sizeof(expected), "%d", P2PT_AUTO_FORMAT);
        if (v == NULL || strcmp(v, expected) != 0)
            return bad(ps, "a table format this build does not read (got '%s'; expected %d, "
                           "the only p2pt-auto version this build reads)",
                       v ? v : "", P2PT_AUTO_FORMAT);
        return no_more(ps, p, "the version");
    }
    case 1:
        return read_arch(ps, p, &t->cc);
    case 2:
        return read_device(ps, *p, t->device);
    default:
        break;
    }
    const char *v = token(p);
    for (path = 0; v != NULL && path < P2PT_AUTO_PATHS; path++)
        if (strcmp(v, p2pt__auto_path_names[path]) == 0)
            break;
    if (strcmp(item, "batch") == 0) {
        /* `batch SIZE ENGINE` (device memory) or `batch h2d|d2h SIZE ENGINE`:
         * a list's name starts with a letter, a size never does. */
        if (v != NULL && path >= P2PT_AUTO_H2D && path < P2PT_AUTO_PATHS) {
            snprintf(what, sizeof(what), "batch %s", v);
            return read_band(ps, p, token(p), what,
                             &t->host_batch[P2PT_AUTO_HOST_INDEX(path)],
                             LAST_HOST_BATCH(P2PT_AUTO_HOST_INDEX(path)));
        }
        if (v != NULL && isalpha((unsigned char)*v))
            return bad(ps, "unknown batch list (got '%s'; expected a size for batches in "
                           "device memory, or h2d or d2h and then a size)",
                       v);
        return read_band(ps, p, v, "batch", &t->batch, LAST_BATCH);
    }
    if (strcmp(item, "link") == 0) {
        /* `link h2d|d2h|peer CTAS`: the CTAs that saturate the host link
         * each way, or a peer link. */
        const bool peer = v != NULL && strcmp(v, "peer") == 0;
        if (v == NULL || (!peer && path != P2PT_AUTO_H2D && path != P2PT_AUTO_D2H))
            return bad(ps, "link direction (got '%s'; expected h2d, d2h or peer)", v ? v : "");
        const char *n = token(p);
        char *end = NULL;
        unsigned long c = n ? strtoul(n, &end, 10) : 0;
        if (n == NULL || *end != '\0' || !isdigit((unsigned char)*n) || c < 1 || c > 4096)
            return bad(ps, "link %s CTAs (got '%s'; expected an integer from 1 to 4096)", v,
                       n ? n : "");
        const int at = peer ? P2PT_LINK_PEER : P2PT_AUTO_HOST_INDEX(path);
        if (ps->link_line[at] != 0)
            return bad(ps, "'link %s' given twice (expected one, the one on line %zu)", v,
                       ps->link_line[at]);
        ps->link_line[at] = ps->line;
        t->link[at] = (uint32_t)c;
        return no_more(ps, p, "the CTA count");
    }
    if (strcmp(item, "copy") != 0 && strcmp(item, "graph") != 0)
        return bad(ps, "unknown item (got '%s'; expected " ITEMS ")", item);
    if (v == NULL || path == P2PT_AUTO_PATHS)
        return bad(ps, "%s path (got '%s'; expected " PATHS ")", v ? "unknown" : "missing",
                   v ? v : "");
    snprintf(what, sizeof(what), "%s %s", item, v);
    if (item[0] == 'c')
        return read_band(ps, p, token(p), what, &t->copy[path], LAST_COPY(path));
    return read_band(ps, p, token(p), what, &t->graph[path], LAST_GRAPH(path));
}

p2pt_status p2pt__auto_table_parse(const char *text, size_t len, const char *source,
                                   const char *const *engines, int n_engines,
                                   struct p2pt_auto_table *out)
{
    struct parser ps = {.source = source ? source : "auto table",
                        .engines = engines,
                        .n_engines = engines ? n_engines : 0};
    struct p2pt_auto_table t;
    char line[P2PT_AUTO_MAX_LINE + 1];
    p2pt_status st = P2PT_SUCCESS;

    memset(&t, 0, sizeof(t));
    if (text == NULL || len == 0)
        return bad(&ps, "the table is empty (expected 'p2pt-auto %d' as its first item)",
                   P2PT_AUTO_FORMAT);
    for (size_t at = 0; at < len;) {
        const char *s = text + at, *nl = memchr(s, '\n', len - at);
        size_t n = nl ? (size_t)(nl - s) : len - at;
        at += n + (nl != NULL);
        ps.line++;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        const char *nul = memchr(s, '\0', n);
        if (nul != NULL)
            return bad(&ps, "a NUL byte at column %zu (got '\\0'; expected text)",
                       (size_t)(nul - s) + 1);
        if (n > P2PT_AUTO_MAX_LINE)
            return bad(&ps, "line too long (got '%.32s...', %zu characters; expected at "
                            "most %d)",
                       s, n, P2PT_AUTO_MAX_LINE);
        memcpy(line, s, n);
        line[n] = '\0';
        char *hash = strchr(line, '#'), *p = line;
        if (hash != NULL)
            *hash = '\0';
        const char *item = token(&p);
        if (item != NULL)
            P2PT_TRY(read_item(&ps, &t, item, &p));
    }
    ps.line = 0;
    if (ps.given[0] == 0)
        return bad(&ps, "no items, only comments and blank lines (expected 'p2pt-auto %d' "
                        "as the first item)",
                   P2PT_AUTO_FORMAT);
    if (ps.given[1] == 0)
        return bad(&ps, "no 'arch' line");
    for (int i = 0; i < P2PT_AUTO_GPU_PATHS; i++)
        if (t.copy[i].n == 0)
            return bad(&ps, "no 'copy %s' bands (every path between GPUs needs copy bands: "
                            "local, push, pull; h2d and d2h may have none)",
                       p2pt__auto_path_names[i]);
    if (t.batch.n == 0)
        return bad(&ps, "no 'batch' bands");
    /* A graph list refines its path's copy list; without one, copies on
     * that path go to the fallback engine captured or not. */
    for (int i = P2PT_AUTO_GPU_PATHS; i < P2PT_AUTO_PATHS; i++)
        if (t.graph[i].n != 0 && t.copy[i].n == 0) {
            const char *name = p2pt__auto_path_names[i];
            ps.line = ps.last[LAST_GRAPH(i)];
            return bad(&ps, "'graph %s' bands but no 'copy %s' bands (got 'graph %s'; "
                            "expected a 'copy %s' list too, e.g. 'copy %s 0 %s')",
                       name, name, name, name, name, example_engine(&ps));
        }
    snprintf(t.source, sizeof(t.source), "%s", ps.source);
    *out = t;
out:
    return st;
}

/* The file's text in one read: a table is small, and a size limit keeps a
 * wrong path (a log, a device node) from being read whole. Opened without
 * blocking and then required to be a regular file: a FIFO or a terminal
 * would otherwise hold p2pt_init until someone writes to it. */
p2pt_status p2pt__auto_table_load(const char *path, const char *const *engines, int n_engines,
                                  struct p2pt_auto_table *out)
{
    p2pt_status st = P2PT_SUCCESS;
    char *text = NULL;
    struct stat sb;
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
    if (fd < 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: cannot open the auto table (%s)",
                          path ? path : "(no path)", path ? strerror(errno) : "no path given");
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: the auto table is not a regular file (a FIFO, a device or a "
                          "directory); give the path of a table file",
                          path);
    }
    FILE *f = fdopen(fd, "rb");
    if (f == NULL) {
        close(fd);
        return p2pt__fail(P2PT_SYSTEM_ERROR, "%s: cannot read the auto table (%s)", path,
                          strerror(errno));
    }
    text = malloc(P2PT_AUTO_MAX_TEXT + 1);
    if (text == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        goto out;
    }
    size_t n = fread(text, 1, P2PT_AUTO_MAX_TEXT + 1, f);
    if (ferror(f)) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: cannot read the auto table (%s)", path,
                        strerror(errno));
        goto out;
    }
    if (n == 0) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "%s: the auto table file is empty (expected 'p2pt-auto %d' as its "
                        "first item)",
                        path, P2PT_AUTO_FORMAT);
        goto out;
    }
    if (n > P2PT_AUTO_MAX_TEXT) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "%s: the auto table file is larger than %d bytes; is it a table?",
                        path, P2PT_AUTO_MAX_TEXT);
        goto out;
    }
    P2PT_TRY(p2pt__auto_table_parse(text, n, path, engines, n_engines, out));
out:
    free(text);
    fclose(f);
    return st;
}

/* snprintf into a buffer piece by piece, counting what did not fit. */
struct sink {
    char *buf;
    size_t len, used;
};

static void emit(struct sink *s, const char *fmt, ...) P2PT_PRINTF(2, 3);
static void emit(struct sink *s, const char *fmt, ...)
{
    bool room = s->used < s->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? s->buf + s->used : NULL, room ? s->len - s->used : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        s->used += (size_t)n;
}

static void emit_list(struct sink *s, const char *what, const struct p2pt_auto_list *l,
                      const char *const *engines)
{
    char size[24];
    for (uint32_t i = 0; i < l->n && i < P2PT_AUTO_MAX_BANDS; i++)
        emit(s, "%s %s %s\n", what, p2pt__auto_size_text(l->band[i].from, size),
             engines ? engines[l->band[i].engine] : "?");
}

size_t p2pt__auto_table_format(const struct p2pt_auto_table *t, const char *const *engines,
                               char *buf, size_t len)
{
    struct sink s = {buf, buf ? len : 0, 0};
    char what[24];
    if (s.len > 0)
        buf[0] = '\0';
    emit(&s, "p2pt-auto %d\narch sm_%d\n", P2PT_AUTO_FORMAT, t->cc);
    if (t->device[0] != '\0')
        emit(&s, "device %.95s\n", t->device);
    for (int i = 0; i < P2PT_AUTO_PATHS; i++) {
        snprintf(what, sizeof(what), "copy %s", p2pt__auto_path_names[i]);
        emit_list(&s, what, &t->copy[i], engines);
        snprintf(what, sizeof(what), "graph %s", p2pt__auto_path_names[i]);
        emit_list(&s, what, &t->graph[i], engines);
    }
    emit_list(&s, "batch", &t->batch, engines);
    for (int i = 0; i < P2PT_AUTO_HOST_PATHS; i++) {
        snprintf(what, sizeof(what), "batch %s", p2pt__auto_path_names[P2PT_AUTO_H2D + i]);
        emit_list(&s, what, &t->host_batch[i], engines);
    }
    for (int i = 0; i < P2PT_AUTO_HOST_PATHS; i++)
        if (t->link[i] != 0)
            emit(&s, "link %s %u\n", p2pt__auto_path_names[P2PT_AUTO_H2D + i], t->link[i]);
    if (t->link[P2PT_LINK_PEER] != 0)
        emit(&s, "link peer %u\n", t->link[P2PT_LINK_PEER]);
    return s.used;
}
