/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every environment variable p2pt reads, read in one place, once per
 * p2pt_init, and checked before any CUDA library is touched: a typo is
 * reported the same way on a laptop and on a GPU server. The shared
 * settings are this file's; each engine's are declared in its own file and
 * handed in by the router (struct p2pt_config_known), so this module knows
 * no engine. env.md documents each one; keep the two in step.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

#define DEFAULT_LOG_LEVEL P2PT_LOG_WARN
#define DEFAULT_CUDA_LIBRARY "libcuda.so.1"

/* Edit distance of a and b, case aside, counting a swap of two neighbours
 * as one edit (the commonest slip of a typist); (size_t)-1 for names longer
 * than any p2pt knows. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), prev2[64], prev[64], row[64];
    if (la >= P2PT_ARRAY_LEN(row) || lb >= P2PT_ARRAY_LEN(row))
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            int ca = toupper((unsigned char)a[i - 1]), cb = toupper((unsigned char)b[j - 1]);
            size_t best = prev[j - 1] + (ca != cb);
            if (prev[j] + 1 < best)
                best = prev[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            if (i > 1 && j > 1 && ca == toupper((unsigned char)b[j - 2]) &&
                toupper((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            row[j] = best;
        }
        memcpy(prev2, prev, (lb + 1) * sizeof(prev[0]));
        memcpy(prev, row, (lb + 1) * sizeof(row[0]));
    }
    return prev[lb];
}

/* Whether `name` starts with the first `len` characters of `typed`, case aside. */
static bool starts_with(const char *name, const char *typed, size_t len)
{
    return strlen(name) >= len && strncasecmp(name, typed, len) == 0;
}

/* Where the last word of a name starts (after its last '_'; 0 for none). */
static size_t last_word(const char *name)
{
    const char *u = strrchr(name, '_');
    return u ? (size_t)(u - name) + 1 : 0;
}

/*
 * The one of `names` that `typed` most likely meant, or NULL. Every refused
 * or unread name is answered here (a variable in the environment, an
 * options item, a transport), so a slip gets the same answer wherever it is
 * made. Likely means: the same name in another case; a name cut short that
 * only one name starts with; a near miss (one edit per 8 characters and one
 * more, at most 3, so "tmaa" is tma and "xyz" is not ce); or only the last
 * word wrong where one name alone has the words before it
 * (P2P_TRANSPORT_CHUNK_SIZE). Anything less likely gets no suggestion: one
 * for any word at all would send the reader the wrong way.
 */
static const char *suggest(const char *const *names, size_t n, const char *typed)
{
    size_t len = strlen(typed), stem = last_word(typed), best = (size_t)-1;
    const char *nearest = NULL, *cut = NULL, *same_stem = NULL;
    int n_cut = 0, n_stem = 0;
    if (len == 0)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(typed, names[i]), most = 1 + strlen(names[i]) / 8;
        if (d == 0)
            return names[i];
        if (d <= (most < 3 ? most : 3) && d < best) {
            best = d;
            nearest = names[i];
        }
        if (starts_with(names[i], typed, len)) {
            cut = names[i];
            n_cut++;
        }
        if (stem > 0 && last_word(names[i]) == stem && starts_with(names[i], typed, stem)) {
            same_stem = names[i];
            n_stem++;
        }
    }
    if (n_cut == 1)
        return cut;
    if (nearest != NULL)
        return nearest;
    return n_stem == 1 ? same_stem : NULL;
}

/* P2P_TRANSPORT: one of the names the caller knows, any case. */
static p2pt_status read_transport(struct p2pt_config *cfg, const char *value,
                                  const char *source, const struct p2pt_config_known *known)
{
    char names[128];
    size_t used = 0;
    names[0] = '\0';
    for (int i = 0; i < known->n_transports; i++) {
        if (strcasecmp(value, known->transports[i]) == 0) {
            snprintf(cfg->transport, sizeof(cfg->transport), "%s", known->transports[i]);
            return P2PT_SUCCESS;
        }
        int w = snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
                         known->transports[i]);
        if (w > 0 && (size_t)w < sizeof(names) - used)
            used += (size_t)w;
    }
    const char *meant = suggest(known->transports, (size_t)known->n_transports, value);
    return p2pt__fail(P2PT_INVALID_ARGUMENT,
                      "%s=\"%s\" is not a transport p2pt knows; accepted "
                      "(any case): %s%s%s%s",
                      source, value, names, meant ? "; did you mean " : "", meant ? meant : "",
                      meant ? "?" : "");
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
 * not find cubins somewhere it did not choose. Only absolute bases that fit
 * a path count: one too long is passed over for the next. */
static void default_cache_dir(char *dst, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = -1;
    dst[0] = '\0';
    if (xdg != NULL && xdg[0] == '/')
        n = snprintf(dst, len, "%s/p2pt", xdg);
    if ((n < 0 || (size_t)n >= len) && home != NULL && home[0] == '/')
        n = snprintf(dst, len, "%s/.cache/p2pt", home);
    if (n < 0 || (size_t)n >= len)
        dst[0] = '\0';
}

/* Shared settings read by the same code as the engines' declared ones
 * (P2P_TRANSPORT_SM_BUDGET also takes "none", which is looked for first). */
static const struct p2pt_setting validate_item = {
    .name = "P2P_TRANSPORT_VALIDATE",
    .kind = P2PT_SETTING_BOOL,
    .offset = offsetof(struct p2pt_config, validate),
    .def = 1,
    .accepted = "0 or 1",
};
static const struct p2pt_setting sm_budget_item = {
    .name = "P2P_TRANSPORT_SM_BUDGET",
    .kind = P2PT_SETTING_INT,
    .offset = offsetof(struct p2pt_config, sm_budget),
    .min = 0,
    .max = P2PT_SM_BUDGET_MAX,
    .accepted = "none, or an integer from 0 (no kernel at all: the copy engine) to 4096 "
                "(at most that many CTAs per launch)",
};

static const struct p2pt_setting link_peer_item = {
    .name = "P2P_TRANSPORT_LINK_PEER",
    .kind = P2PT_SETTING_INT,
    .offset = offsetof(struct p2pt_config, link_peer),
    .min = 0,
    .max = P2PT_SM_BUDGET_MAX,
    .accepted = "an integer from 0 (the table's 'link peer': 32 on sm_90) to 4096 (the CTAs "
                "of a kernel whose pieces all cross a peer link)",
};

/* The shared variables; each engine's come from its declarations. */
static const char *const shared_vars[] = {
    "P2P_TRANSPORT",           "P2P_TRANSPORT_LOG",       "P2P_TRANSPORT_SM_BUDGET",
    "P2P_TRANSPORT_VALIDATE",  "P2P_CUDA_LIBRARY",        "P2P_NVRTC_LIBRARY",
    "P2P_TRANSPORT_CACHE_DIR", "P2P_TRANSPORT_AUTO_TABLE", "P2P_TRANSPORT_LINK_PEER",
};

size_t p2pt__config_known_vars(const struct p2pt_config_known *known, const char **names,
                               size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < P2PT_ARRAY_LEN(shared_vars) && n < max; i++)
        names[n++] = shared_vars[i];
    for (int g = 0; known != NULL && g < known->n_groups; g++)
        for (int i = 0; known->groups[g] != NULL && i < known->groups[g]->n && n < max; i++)
            names[n++] = known->groups[g]->items[i].name;
    return n;
}

/* Every variable p2pt reads, for lookups and suggestions. */
struct var_list {
    const char *name[P2PT_CONFIG_VARS_MAX];
    size_t n;
};

static void list_vars(struct var_list *l, const struct p2pt_config_known *known)
{
    l->n = p2pt__config_known_vars(known, l->name, P2PT_ARRAY_LEN(l->name));
}

extern char **environ;

/* A misspelt variable would otherwise change nothing and say nothing: warn
 * about every P2P_TRANSPORT* name p2pt does not read, and every other P2P_*
 * name that suggest() takes for one it does, naming that one. */
void p2pt__config_warn_unknown_env(const struct p2pt_logger *log,
                                   const struct p2pt_config_known *known)
{
    struct var_list vars;
    list_vars(&vars, known);
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        char name[64];
        if (strncmp(*e, "P2P_", 4) != 0 || eq == NULL || (size_t)(eq - *e) >= sizeof(name))
            continue;
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = '\0';
        bool read = false;
        for (size_t i = 0; i < vars.n && !read; i++)
            read = strcmp(name, vars.name[i]) == 0;
        if (read)
            continue;
        const char *meant = suggest(vars.name, vars.n, name);
        if (meant != NULL)
            P2PT_WARN(log, "%s is set but p2pt reads no such variable (did you mean %s? "
                      "env.md lists them all)", name, meant);
        else if (strncmp(name, "P2P_TRANSPORT", 13) == 0)
            P2PT_WARN(log, "%s is set but p2pt reads no such variable (env.md lists them all)",
                      name);
    }
}

#define MAX_OPTIONS 32
#define OPTIONS_MAX_LEN 4096

/* p2pt_init_args.options, cut into NAME=VALUE items (a private copy), and
 * the names they may use. */
struct options {
    char buf[OPTIONS_MAX_LEN];
    int n;
    const char *name[MAX_OPTIONS];
    const char *value[MAX_OPTIONS];
    struct var_list vars;
};

/* Status 4 for an options item that names no variable p2pt reads: the
 * accepted names, and the one it likely meant (names are exact, the
 * environment's upper case, so a lower-case item is told how to spell it). */
static p2pt_status unknown_option(const struct var_list *vars, const char *item)
{
    char names[1024] = "", hint[96] = "";
    size_t used = 0;
    for (size_t i = 0; i < vars->n && used < sizeof(names); i++)
        used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
                                 vars->name[i]);
    const char *meant = suggest(vars->name, vars->n, item);
    if (meant != NULL)
        snprintf(hint, sizeof(hint), "; did you mean %s?", meant);
    return p2pt__fail(P2PT_INVALID_ARGUMENT,
                      "p2pt_init_args.options: \"%s\" is not a p2pt setting; "
                      "accepted (env.md): %s%s",
                      item, names, hint);
}

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
                              "(e.g. \"P2P_TRANSPORT_LOG=info P2P_TRANSPORT_VALIDATE=0\")",
                              item);
        *eq = '\0';
        bool known = false;
        for (size_t i = 0; i < o->vars.n && !known; i++)
            known = strcmp(item, o->vars.name[i]) == 0;
        if (!known)
            return unknown_option(&o->vars, item);
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

/* One declared setting from the options or the environment, when set;
 * `from` says where its value came from (for a group's check). */
static p2pt_status read_declared(const struct options *o, const struct p2pt_setting *s,
                                 void *values, char from[96])
{
    p2pt_status st = P2PT_SUCCESS;
    const char *v;
    char label[96];
    P2PT_TRY(setting(o, s->name, label, &v));
    if (v != NULL) {
        P2PT_TRY(p2pt__setting_read(s, values, label, v));
        memcpy(from, label, sizeof(label));
    }
out:
    return st;
}

/* Group `g` into `values`: defaults, each item as set, then its check. */
static p2pt_status read_group(const struct options *o, const struct p2pt_settings *g,
                              void *values)
{
    p2pt_status st = P2PT_SUCCESS;
    char from[P2PT_SETTINGS_ITEMS][96];
    const char *from_ptr[P2PT_SETTINGS_ITEMS];
    if (g->n > P2PT_SETTINGS_ITEMS || g->size > P2PT_SETTINGS_BYTES)
        return p2pt__fail(P2PT_INTERNAL_ERROR,
                          "the %s settings declare %d items of %zu bytes; a group holds at "
                          "most %d items of %d bytes",
                          g->owner, g->n, g->size, P2PT_SETTINGS_ITEMS, P2PT_SETTINGS_BYTES);
    p2pt__settings_defaults(g, values);
    for (int i = 0; i < g->n; i++) {
        snprintf(from[i], sizeof(from[i]), "%s (default)", g->items[i].name);
        from_ptr[i] = from[i];
        P2PT_TRY(read_declared(o, &g->items[i], values, from[i]));
    }
    if (g->check != NULL)
        st = g->check(values, from_ptr);
out:
    return st;
}

p2pt_status p2pt__config_parse(struct p2pt_config *cfg, const char *options_text,
                               const char *transport_override,
                               const struct p2pt_config_known *known)
{
    p2pt_status st = P2PT_SUCCESS;
    const char *v;
    char var[96];
    struct options *opts = malloc(sizeof(*opts));

    if (opts == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
    memset(cfg, 0, sizeof(*cfg));
    list_vars(&opts->vars, known);
    /* The engine that runs any request is the default, as the caller says. */
    snprintf(cfg->fallback, sizeof(cfg->fallback), "%s", known->fallback ? known->fallback : "");
    snprintf(cfg->transport, sizeof(cfg->transport), "%s", cfg->fallback);
    cfg->log_level = DEFAULT_LOG_LEVEL;
    cfg->sm_budget = -1;
    cfg->validate = (int)validate_item.def;
    snprintf(cfg->cuda_library, sizeof(cfg->cuda_library), "%s", DEFAULT_CUDA_LIBRARY);
    P2PT_TRY(parse_options(opts, options_text));

    P2PT_TRY(setting(opts, "P2P_TRANSPORT_LOG", var, &v));
    if (v != NULL)
        P2PT_TRY(read_log_level(cfg, var, v));
    if (transport_override != NULL) {
        P2PT_TRY(read_transport(cfg, transport_override, "p2pt_init_args.transport", known));
    } else {
        P2PT_TRY(setting(opts, "P2P_TRANSPORT", var, &v));
        if (v != NULL)
            P2PT_TRY(read_transport(cfg, v, var, known));
    }
    /* Each engine's own settings, in the registry's order, each checked as a
     * whole once all its values are read. */
    for (int g = 0; g < known->n_groups && g < P2PT_SETTINGS_GROUPS; g++)
        if (known->groups[g] != NULL)
            P2PT_TRY(read_group(opts, known->groups[g], cfg->settings[g].bytes));
    P2PT_TRY(setting(opts, sm_budget_item.name, var, &v));
    if (v != NULL && strcasecmp(v, "none") != 0)
        P2PT_TRY(p2pt__setting_read(&sm_budget_item, cfg, var, v));
    P2PT_TRY(read_declared(opts, &validate_item, cfg, var));
    P2PT_TRY(read_declared(opts, &link_peer_item, cfg, var));
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
out:
    free(opts);
    return st;
}
