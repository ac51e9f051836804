/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every environment variable p2pt reads, read in one place, once per
 * p2pt_init, and checked before any CUDA library is touched: a typo is
 * reported the same way on a laptop and on a GPU server. env.md documents
 * each one; keep the two in step.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

/*
 * Defaults, from the chunk x stages x CTA-cap sweep
 * (bench/results/copies.md): chunk and ring depth barely matter at one CTA
 * per SM, so the chunk stays at the 48 KiB the design names and the ring at
 * the deepest that fits it (4 stages), which also loses least when CTAs are
 * capped. max_ctas stays 0 (one CTA per SM, or two when the ring fits
 * twice): every cap tried lost bandwidth.
 */
#define DEFAULT_CHUNK_BYTES (48u * 1024u)
#define DEFAULT_STAGES 4
#define DEFAULT_MAX_CTAS 0
#define DEFAULT_LOG_LEVEL P2PT_LOG_WARN
#define DEFAULT_L2_EVICT_FIRST 0
/* Local TMA copies from this size on take the streaming kernel: from here
 * up it beat the bulk-copy ring on every GPU measured, below it neither won
 * everywhere (bench/results/copies.md, "the driver's shape"). */
#define DEFAULT_STREAM_MIN (8u << 20)
#define DEFAULT_CUDA_LIBRARY "libcuda.so.1"

/* A non-negative decimal integer with an optional binary K, M, G or T suffix
 * (every suffix a message prints is one a value may carry).
 * Rejects signs, junk, empty strings and overflow. Shared with p2pt-bench. */
bool p2pt__parse_size(const char *s, unsigned long long *out)
{
    if (s == NULL || !isdigit((unsigned char)s[0]))
        return false;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    unsigned long long mul = 1;
    switch (*end) {
    case 'K': case 'k': mul = 1ull << 10; end++; break;
    case 'M': case 'm': mul = 1ull << 20; end++; break;
    case 'G': case 'g': mul = 1ull << 30; end++; break;
    case 'T': case 't': mul = 1ull << 40; end++; break;
    default: break;
    }
    if (*end != '\0' || v > ~0ull / mul)
        return false;
    *out = v * mul;
    return true;
}

/* The names a transport setting may take, as the caller knows them. */
struct known_names {
    const char *const *names;
    int n;
};

static p2pt_status read_transport(struct p2pt_config *cfg, const char *value,
                                  const char *source, const struct known_names *known)
{
    char names[128];
    size_t used = 0;
    names[0] = '\0';
    for (int i = 0; i < known->n; i++) {
        if (strcasecmp(value, known->names[i]) == 0) {
            snprintf(cfg->transport, sizeof(cfg->transport), "%s", known->names[i]);
            return P2PT_SUCCESS;
        }
        int w = snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
                         known->names[i]);
        if (w > 0 && (size_t)w < sizeof(names) - used)
            used += (size_t)w;
    }
    return p2pt__fail(P2PT_INVALID_ARGUMENT,
                      "%s=\"%s\" is not a transport p2pt knows; accepted "
                      "(any case): %s",
                      source, value, names);
}

static p2pt_status read_log_level(struct p2pt_config *cfg, const char *var, const char *v)
{
    static const struct {
        const char *name;
        int level;
    } levels[] = {
        {"none", P2PT_LOG_NONE}, {"version", P2PT_LOG_VERSION},
        {"warn", P2PT_LOG_WARN}, {"info", P2PT_LOG_INFO},
        {"abort", P2PT_LOG_ABORT}, {"trace", P2PT_LOG_TRACE},
    };
    for (size_t i = 0; i < P2PT_ARRAY_LEN(levels); i++) {
        if (strcasecmp(v, levels[i].name) == 0) {
            cfg->log_level = levels[i].level;
            return P2PT_SUCCESS;
        }
    }
    unsigned long long n;
    if (p2pt__parse_size(v, &n) && n <= P2PT_LOG_TRACE && strpbrk(v, "KkMmGgTt") == NULL) {
        cfg->log_level = (int)n;
        return P2PT_SUCCESS;
    }
    return p2pt__fail(P2PT_INVALID_ARGUMENT,
                      "%s=\"%s\" is not a log level; accepted "
                      "(any case): none, version, warn, info, abort, trace, or 0..5",
                      var, v);
}

/* A bounded integer variable. `what` describes the accepted range. */
static p2pt_status read_uint(const char *var, const char *v,
                             unsigned long long lo, unsigned long long hi,
                             const char *what, unsigned long long *out)
{
    unsigned long long n;
    if (!p2pt__parse_size(v, &n) || n < lo || n > hi)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s=\"%s\" is not valid: expected %s",
                          var, v, what);
    *out = n;
    return P2PT_SUCCESS;
}

static p2pt_status read_path(char *dst, size_t len, const char *var, const char *v)
{
    if (strlen(v) >= len)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s is %zu characters long; at most %zu are accepted",
                          var, strlen(v), len - 1);
    memcpy(dst, v, strlen(v) + 1);
    return P2PT_SUCCESS;
}

/* $XDG_CACHE_HOME/p2pt, else $HOME/.cache/p2pt (the XDG convention), else
 * no cache: a process with neither variable set (a daemon, a sandbox) should
 * not find cubins somewhere it did not choose. Only absolute bases count. */
static void default_cache_dir(char *dst, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = -1;
    dst[0] = '\0';
    if (xdg != NULL && xdg[0] == '/')
        n = snprintf(dst, len, "%s/p2pt", xdg);
    else if (home != NULL && home[0] == '/')
        n = snprintf(dst, len, "%s/.cache/p2pt", home);
    if (n < 0 || (size_t)n >= len)
        dst[0] = '\0';
}

size_t p2pt__config_smem_bytes(const struct p2pt_config *cfg)
{
    return cfg->chunk_bytes * (size_t)cfg->stages;
}

/* Every variable p2pt reads; the only names p2pt_init_args.options takes. */
static const char *const known_vars[] = {
    "P2P_TRANSPORT",         "P2P_TRANSPORT_LOG",      "P2P_TRANSPORT_CHUNK_BYTES",
    "P2P_TRANSPORT_STAGES",  "P2P_TRANSPORT_MAX_CTAS", "P2P_TRANSPORT_VALIDATE",
    "P2P_TRANSPORT_PDL",     "P2P_TRANSPORT_L2_HINT",  "P2P_CUDA_LIBRARY",
    "P2P_NVRTC_LIBRARY",     "P2P_TRANSPORT_CACHE_DIR", "P2P_TRANSPORT_AUTO_TABLE",
    "P2P_TRANSPORT_STREAM_MIN", "P2P_TRANSPORT_BATCH_STAGING", "P2P_TRANSPORT_SM_BUDGET",
};

const char *const *p2pt__config_known_vars(size_t *n)
{
    *n = P2PT_ARRAY_LEN(known_vars);
    return known_vars;
}

/* Edit distance of a and b, capped (names are short). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= P2PT_ARRAY_LEN(row) || lb >= P2PT_ARRAY_LEN(row))
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The known variable nearest `name`, its distance in *distance; a name cut
 * short (P2P_TRANSPORT_CHUNK) is nearest its whole, and *prefix says whether
 * `name` starts any known name. */
static const char *closest_var(const char *name, size_t *distance, bool *prefix)
{
    const char *closest = NULL;
    size_t best = (size_t)-1;
    *prefix = false;
    for (size_t i = 0; i < P2PT_ARRAY_LEN(known_vars) && best != 0; i++) {
        bool cut = strncmp(name, known_vars[i], strlen(name)) == 0;
        size_t d = edit_distance(name, known_vars[i]);
        *prefix = *prefix || cut;
        d = cut && d > 1 ? 1 : d;
        if (d < best) {
            best = d;
            closest = known_vars[i];
        }
    }
    *distance = best;
    return closest;
}

extern char **environ;

/* A misspelt variable would otherwise change nothing and say nothing: warn
 * about every P2P_TRANSPORT* name p2pt does not read, and every other P2P_*
 * name that is close to one it does, naming the closest. */
void p2pt__config_warn_unknown_env(const struct p2pt_logger *log)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        char name[64];
        if (strncmp(*e, "P2P_", 4) != 0 || eq == NULL || (size_t)(eq - *e) >= sizeof(name))
            continue;
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        size_t best;
        bool prefix;
        const char *closest = closest_var(name, &best, &prefix);
        if (best != 0 && (strncmp(name, "P2P_TRANSPORT", 13) == 0 || prefix || best <= 3))
            P2PT_WARN(log, "%s is set but p2pt reads no such variable (did you mean %s? "
                      "env.md lists them all)", name, closest);
    }
}

#define MAX_OPTIONS 32
#define OPTIONS_MAX_LEN 4096

/* p2pt_init_args.options, cut into NAME=VALUE items (a private copy). */
struct options {
    char buf[OPTIONS_MAX_LEN];
    int n;
    const char *name[MAX_OPTIONS];
    const char *value[MAX_OPTIONS];
};

static p2pt_status parse_options(struct options *o, const char *text)
{
    o->n = 0;
    if (text == NULL)
        return P2PT_SUCCESS;
    size_t len = strlen(text);
    if (len >= sizeof(o->buf))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_init_args.options is %zu characters long; at most %zu "
                          "are accepted",
                          len, sizeof(o->buf) - 1);
    memcpy(o->buf, text, len + 1);
    char *save = NULL;
    for (char *item = strtok_r(o->buf, " \t\n,", &save); item != NULL;
         item = strtok_r(NULL, " \t\n,", &save)) {
        char *eq = strchr(item, '=');
        if (eq == NULL)
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "p2pt_init_args.options: \"%s\" is not NAME=VALUE "
                              "(e.g. \"P2P_TRANSPORT_STAGES=4 P2P_TRANSPORT_CHUNK_BYTES=32K\")",
                              item);
        *eq = '\0';
        bool known = false;
        for (size_t i = 0; i < P2PT_ARRAY_LEN(known_vars) && !known; i++)
            known = strcmp(item, known_vars[i]) == 0;
        if (!known) {
            char names[512] = "";
            size_t used = 0;
            for (size_t i = 0; i < P2PT_ARRAY_LEN(known_vars); i++)
                used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
                                         i ? ", " : "", known_vars[i]);
            /* Only a near miss is suggested: naming some variable for any
             * word at all would send the reader the wrong way. Case is not
             * a miss of its own (names are exact, the environment's upper
             * case), so the distance is taken on the upper-cased name. */
            char upper[64], hint[96] = "";
            size_t best, k = 0;
            bool prefix;
            for (; item[k] != '\0' && k + 1 < sizeof(upper); k++)
                upper[k] = (char)toupper((unsigned char)item[k]);
            upper[k] = '\0';
            const char *closest = closest_var(upper, &best, &prefix);
            if (closest != NULL && (best <= 3 || (prefix && strlen(upper) > 4)))
                snprintf(hint, sizeof(hint), "; did you mean %s?", closest);
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "p2pt_init_args.options: \"%s\" is not a p2pt setting; "
                              "accepted (env.md): %s%s",
                              item, names, hint);
        }
        if (o->n == MAX_OPTIONS)
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "p2pt_init_args.options: more than %d items", MAX_OPTIONS);
        o->name[o->n] = item;
        o->value[o->n] = eq + 1;
        o->n++;
    }
    return P2PT_SUCCESS;
}

/* The value of setting `name` into *v (NULL when unset): the last options
 * item that names it, else the environment. `label` says where it came from,
 * for messages. An empty value is refused rather than read as "unset":
 * `VAR= cmd` is more often a mistake in a launcher script than an intent. */
static p2pt_status setting(const struct options *o, const char *name, char label[96],
                           const char **v)
{
    *v = NULL;
    for (int i = o->n - 1; i >= 0 && *v == NULL; i--) {
        if (strcmp(o->name[i], name) == 0) {
            snprintf(label, 96, "p2pt_init_args.options %s", name);
            *v = o->value[i];
        }
    }
    if (*v == NULL) {
        snprintf(label, 96, "%s", name);
        *v = getenv(name);
    }
    if (*v != NULL && (*v)[0] == '\0')
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s is set but empty; unset it for the default", label);
    return P2PT_SUCCESS;
}

p2pt_status p2pt__config_parse(struct p2pt_config *cfg, const char *options_text,
                               const char *transport_override, const char *const *transports,
                               int n_transports)
{
    const struct known_names known = {transports, n_transports};
    p2pt_status st = P2PT_SUCCESS;
    unsigned long long n = 0;
    const char *v;
    char var[96], chunk_from[96] = "P2P_TRANSPORT_CHUNK_BYTES (default)",
                  stages_from[96] = "P2P_TRANSPORT_STAGES (default)";
    struct options *opts = malloc(sizeof(*opts));

    if (opts == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->transport, sizeof(cfg->transport), "ce");
    cfg->log_level = DEFAULT_LOG_LEVEL;
    cfg->chunk_bytes = DEFAULT_CHUNK_BYTES;
    cfg->stages = DEFAULT_STAGES;
    cfg->max_ctas = DEFAULT_MAX_CTAS;
    cfg->sm_budget = -1;
    cfg->validate = 1;
    cfg->pdl = 1;
    cfg->stream_min = DEFAULT_STREAM_MIN;
    cfg->l2_evict_first = DEFAULT_L2_EVICT_FIRST;
    snprintf(cfg->cuda_library, sizeof(cfg->cuda_library), "%s", DEFAULT_CUDA_LIBRARY);
    P2PT_TRY(parse_options(opts, options_text));

    P2PT_TRY(setting(opts, "P2P_TRANSPORT_LOG", var, &v));
    if (v != NULL)
        P2PT_TRY(read_log_level(cfg, var, v));
    if (transport_override != NULL) {
        P2PT_TRY(read_transport(cfg, transport_override, "p2pt_init_args.transport", &known));
    } else {
        P2PT_TRY(setting(opts, "P2P_TRANSPORT", var, &v));
        if (v != NULL)
            P2PT_TRY(read_transport(cfg, v, var, &known));
    }
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_CHUNK_BYTES", var, &v));
    if (v != NULL) {
        P2PT_TRY(read_uint(var, v, P2PT_CHUNK_MIN, P2PT_CHUNK_MAX,
                           "a multiple of 16 from 16 to 232448 bytes (227K); "
                           "e.g. 49152 or 48K",
                           &n));
        if (n % P2PT_ALIGN != 0) {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "%s=\"%s\" is not valid: %llu is "
                            "not a multiple of 16 (cp.async.bulk moves 16-byte units)",
                            var, v, n);
            goto out;
        }
        cfg->chunk_bytes = (size_t)n;
        snprintf(chunk_from, sizeof(chunk_from), "%s", var);
    }
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_STAGES", var, &v));
    if (v != NULL) {
        P2PT_TRY(read_uint(var, v, P2PT_STAGES_MIN, P2PT_STAGES_MAX,
                           "an integer from 1 to 16", &n));
        cfg->stages = (int)n;
        snprintf(stages_from, sizeof(stages_from), "%s", var);
    }
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_MAX_CTAS", var, &v));
    if (v != NULL) {
        P2PT_TRY(read_uint(var, v, 0, P2PT_MAX_CTAS_MAX,
                           "an integer from 0 (auto: from the SM count) to 4096", &n));
        cfg->max_ctas = (int)n;
    }
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_SM_BUDGET", var, &v));
    if (v != NULL && strcasecmp(v, "none") != 0) {
        P2PT_TRY(read_uint(var, v, 0, P2PT_MAX_CTAS_MAX,
                           "none, or an integer from 0 (no kernel at all: the copy engine) "
                           "to 4096 (at most that many CTAs per launch)",
                           &n));
        cfg->sm_budget = (int)n;
    }
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_VALIDATE", var, &v));
    if (v != NULL) {
        P2PT_TRY(read_uint(var, v, 0, 1, "0 or 1", &n));
        cfg->validate = (int)n;
    }
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_PDL", var, &v));
    if (v != NULL) {
        P2PT_TRY(read_uint(var, v, 0, 1, "0 or 1", &n));
        cfg->pdl = (int)n;
    }
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_STREAM_MIN", var, &v));
    if (v != NULL) {
        P2PT_TRY(read_uint(var, v, 0, 1ull << 40,
                           "a size from 0 (never) to 1T bytes, e.g. 16M", &n));
        cfg->stream_min = (size_t)n;
    }
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_BATCH_STAGING", var, &v));
    if (v != NULL) {
        if (strcasecmp(v, "auto") == 0) {
            cfg->batch_staging = P2PT_STAGING_AUTO;
        } else if (strcasecmp(v, "gpu") == 0) {
            cfg->batch_staging = P2PT_STAGING_GPU;
        } else if (strcasecmp(v, "host") == 0) {
            cfg->batch_staging = P2PT_STAGING_HOST;
        } else {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "%s=\"%s\" is not valid: expected auto, gpu or host (any case)",
                            var, v);
            goto out;
        }
    }
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_L2_HINT", var, &v));
    if (v != NULL) {
        if (strcasecmp(v, "evict_first") == 0)
            cfg->l2_evict_first = 1;
        else if (strcasecmp(v, "none") == 0)
            cfg->l2_evict_first = 0;
        else {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "%s=\"%s\" is not valid: expected "
                            "none or evict_first (any case)",
                            var, v);
            goto out;
        }
    }
    P2PT_TRY(setting(opts, "P2P_CUDA_LIBRARY", var, &v));
    if (v != NULL)
        P2PT_TRY(read_path(cfg->cuda_library, sizeof(cfg->cuda_library), var, v));
    P2PT_TRY(setting(opts, "P2P_NVRTC_LIBRARY", var, &v));
    if (v != NULL)
        P2PT_TRY(read_path(cfg->nvrtc_library, sizeof(cfg->nvrtc_library), var, v));
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_CACHE_DIR", var, &v));
    if (v != NULL) {
        if (strcasecmp(v, "off") != 0)
            P2PT_TRY(read_path(cfg->cache_dir, sizeof(cfg->cache_dir), var, v));
    } else {
        default_cache_dir(cfg->cache_dir, sizeof(cfg->cache_dir));
    }
    /* Read by the router when the transport is auto (a table given to a
     * fixed transport is still checked for length, never opened). */
    P2PT_TRY(setting(opts, "P2P_TRANSPORT_AUTO_TABLE", var, &v));
    if (v != NULL)
        P2PT_TRY(read_path(cfg->auto_table, sizeof(cfg->auto_table), var, v));

    /* The ring must fit in one CTA's shared memory on any Hopper part; the
     * device's own limit is checked again when the kernel is prepared. */
    if (p2pt__config_smem_bytes(cfg) > P2PT_CHUNK_MAX) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "%s=%zu x %s=%d = "
                        "%zu bytes of shared memory per CTA, over the limit of %u "
                        "bytes (227K); lower one of them",
                        chunk_from, cfg->chunk_bytes, stages_from, cfg->stages,
                        p2pt__config_smem_bytes(cfg),
                        P2PT_CHUNK_MAX);
        goto out;
    }
out:
    free(opts);
    return st;
}
