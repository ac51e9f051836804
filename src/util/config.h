/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The configuration of one handle: every environment variable and
 * init-argument setting, read once per p2pt_init and checked before any CUDA
 * library is touched. CUDA-free (env.md documents each variable). The
 * settings shared by the whole library are fields here; the ones an engine
 * owns it declares itself (settings.h), and this module reads them into
 * opaque slots without knowing the engine.
 */
#ifndef P2PT_CONFIG_H
#define P2PT_CONFIG_H

#include "common.h"
#include "settings.h"

/* Not an engine: the router's per-request choice among them (route_auto.c). */
#define P2PT_AUTO_NAME "auto"

#define P2PT_PATH_MAX 1024
/* P2P_TRANSPORT_SM_BUDGET's largest value (CTAs per launch). */
#define P2PT_SM_BUDGET_MAX 4096

/* Groups of declared settings a configuration holds (one per engine at
 * most), the bytes of each group's struct, and the names config is told. */
#define P2PT_SETTINGS_GROUPS 8
#define P2PT_SETTINGS_BYTES 128
#define P2PT_CONFIG_NAMES 16
/* Every variable p2pt reads, shared and declared, at most. */
#define P2PT_CONFIG_VARS_MAX 64

struct p2pt_config {
    char transport[16];           /* lower-case name of a registered transport, or "auto" */
    char fallback[16];            /* the engine that runs any request, named in remedies */
    int log_level;                /* built-in logger threshold */
    int sm_budget;                /* P2P_TRANSPORT_SM_BUDGET: -1 = none, 0 = no kernel,
                                     N = at most N CTAs per launch */
    int validate;                 /* P2P_TRANSPORT_VALIDATE, 0 or 1 */
    int link_peer;                /* P2P_TRANSPORT_LINK_PEER: 0 = the policy's table,
                                     N = the CTAs of a kernel whose pieces all cross
                                     a peer link */
    char cuda_library[P2PT_PATH_MAX];  /* P2P_CUDA_LIBRARY */
    char nvrtc_library[P2PT_PATH_MAX]; /* P2P_NVRTC_LIBRARY, "" = search */
    char cache_dir[P2PT_PATH_MAX];     /* P2P_TRANSPORT_CACHE_DIR, "" = no cache */
    char auto_table[P2PT_PATH_MAX];    /* P2P_TRANSPORT_AUTO_TABLE, "" = built-in */
    /* Group i of p2pt_config_known.groups, read into its owner's struct:
     * opaque here, the owner reads its own (an engine copies it into its
     * state at init). */
    union {
        max_align_t align;
        unsigned char bytes[P2PT_SETTINGS_BYTES];
    } settings[P2PT_SETTINGS_GROUPS];
};

/*
 * What config is told by the module that knows the engines (the router's
 * p2pt__config_known), since it may include none of them: the names
 * P2P_TRANSPORT takes (the engines' and "auto"), the engine that runs any
 * request (the default transport, named in remedies), and the settings
 * each engine declares (groups[i] is read into cfg->settings[i]; NULL for
 * an engine that declares none).
 */
struct p2pt_config_known {
    const char *transports[P2PT_CONFIG_NAMES];
    int n_transports;
    const char *fallback;
    const struct p2pt_settings *groups[P2PT_SETTINGS_GROUPS];
    int n_groups;
};

/*
 * Defaults, then the environment, then `options` (p2pt_init_args.options:
 * "NAME=VALUE" items separated by spaces or commas, NAME one of the
 * variables; NULL for none), then `transport_override`
 * (p2pt_init_args.transport), one of known->transports in any case. Every
 * group of known->groups is read the same way, then checked. Fails with
 * P2PT_INVALID_ARGUMENT naming where the value came from, the value and
 * what is accepted. Touches no CUDA library.
 */
P2PT_INTERNAL p2pt_status p2pt__config_parse(struct p2pt_config *cfg, const char *options,
                                             const char *transport_override,
                                             const struct p2pt_config_known *known);
/* WARN, through `log`, about every P2P_* variable of the environment that
 * looks like one of p2pt's but is not (a misspelling), naming the closest. */
P2PT_INTERNAL void p2pt__config_warn_unknown_env(const struct p2pt_logger *log,
                                                 const struct p2pt_config_known *known);
/* Every variable p2pt reads (the names `options` takes too): the shared
 * ones, then each group's, at most `max` into `names`; returns how many.
 * env.md documents exactly these (tests/test_docs.c). */
P2PT_INTERNAL size_t p2pt__config_known_vars(const struct p2pt_config_known *known,
                                             const char **names, size_t max);

#endif /* P2PT_CONFIG_H */
