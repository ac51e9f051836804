/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry of engines (registry.c): which engines exist, in order.
 * An engine's index here is its index in per-engine counters and in auto's
 * crossover tables.
 */
#ifndef P2PT_REGISTRY_H
#define P2PT_REGISTRY_H

#include "transport.h"

/* The engines the tests and the benchmark name directly (registry.c
 * declares every engine it lists). */
P2PT_INTERNAL extern const struct p2pt_transport p2pt__transport_ce;
P2PT_INTERNAL extern const struct p2pt_transport p2pt__transport_tma;

/* Register an engine defined outside the library's list (P2PT_ENGINES),
 * after those: the tests' engines. Not thread-safe: call it before any
 * handle exists. Registering one twice is a no-op. */
P2PT_INTERNAL p2pt_status p2pt__engine_register(const struct p2pt_transport *t);
/* Case-insensitive lookup in the registry; NULL when unknown. */
P2PT_INTERNAL const struct p2pt_transport *p2pt__transport_find(const char *name);
/* The registry's i-th engine, NULL past the end. */
P2PT_INTERNAL const struct p2pt_transport *p2pt__transport_at(int i);
/* The registry's names in order, at most `max` of them; returns how many
 * (an engine's index in a crossover table is its registry position). */
P2PT_INTERNAL int p2pt__engine_names(const char **names, int max);
/* Its position in the registry (the index of per-engine counters). */
P2PT_INTERNAL int p2pt__transport_index(const struct p2pt_transport *t);
/* The engine that runs any request (P2PT_CAP_FALLBACK). */
P2PT_INTERNAL const struct p2pt_transport *p2pt__fallback_engine(void);
/* The first engine with every capability in `caps`; NULL when none. */
P2PT_INTERNAL const struct p2pt_transport *p2pt__engine_with(unsigned caps);
/* Each engine's declared settings in registry order (NULL for an engine
 * that declares none), at most `max`; returns how many. Config reads group
 * i into cfg->settings[i]. */
P2PT_INTERNAL int p2pt__engine_settings(const struct p2pt_settings **groups, int max);
/* Engine `t`'s settings as `cfg` read them (its group's slot); NULL for an
 * engine outside the registry. */
P2PT_INTERNAL const void *p2pt__engine_settings_in(const struct p2pt_config *cfg,
                                                   const struct p2pt_transport *t);

#endif /* P2PT_REGISTRY_H */
