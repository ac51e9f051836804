/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The router (router.c): which engine runs an operation. The router asks
 * the handle's policy (policy.h), then, for a copy, the engine's can_copy:
 * a refusal sends the copy to the fallback engine, counted per engine and
 * logged once per handle whatever the policy. The engines it picks from
 * are the registry's (registry.h).
 */
#ifndef P2PT_ROUTER_H
#define P2PT_ROUTER_H

#include "config.h"
#include "registry.h"

struct p2pt_policy;

/* The policy a P2P_TRANSPORT value selects (case-insensitive): the fixed
 * one for an engine's name, else a named policy (auto); NULL when none. */
P2PT_INTERNAL const struct p2pt_policy *p2pt__policy_find(const char *name);
/* The handle's transport name: a registered engine's, or its policy's. */
P2PT_INTERNAL const char *p2pt__handle_transport_name(const struct p2pt_handle *h);
/* What config is told about the engines (config.h): the registry's names
 * and the named policies', the fallback engine, and each engine's declared
 * settings by registry index. */
P2PT_INTERNAL void p2pt__config_known(struct p2pt_config_known *known);
/* p2pt__config_parse against p2pt__config_known. */
P2PT_INTERNAL p2pt_status p2pt__config_read(struct p2pt_config *cfg, const char *options,
                                            const char *transport_override);

/*
 * The engine that runs resolved copy `r` (*t): the policy's choice when its
 * can_copy says yes, else the fallback engine (a real run counts it in
 * engine_fallbacks and logs it once per handle with the reason). When `why`
 * is not NULL (a dry run) it gets the reason in words and nothing is
 * counted.
 */
P2PT_INTERNAL p2pt_status p2pt__route(struct p2pt_handle *h, const struct p2pt_request *r,
                                      const struct p2pt_transport **t, char *why, size_t len);
/* The same for a host batch (stream resolved; see policy.h's route_batch):
 * before its pass, where b->route_later says whether the choice waits for
 * the pass, and after it when it did. */
P2PT_INTERNAL p2pt_status p2pt__route_batch(struct p2pt_handle *h, struct p2pt_batch *b,
                                            const struct p2pt_transport **t, char *why,
                                            size_t len);
/* The engine for a signal or a wait (the first with P2PT_CAP_SIGNAL,
 * whatever the policy), or status 6 under a budget of no kernel. */
P2PT_INTERNAL p2pt_status p2pt__route_signal(struct p2pt_handle *h, const char *fn,
                                             const struct p2pt_transport **t, char *why,
                                             size_t len);
/* The engine for a device batch: status 6 when the policy has no engine
 * (the message names entry point `fn`). */
P2PT_INTERNAL p2pt_status p2pt__route_device_batch(struct p2pt_handle *h, const char *fn,
                                                   const struct p2pt_transport **t, char *why,
                                                   size_t len);

/* For a kernel engine `t`: the CTAs that saturate the host link of `device`,
 * {h2d, d2h} (0: no cap); {0, 0} for an engine without kernels. */
P2PT_INTERNAL p2pt_status p2pt__route_link(struct p2pt_handle *h, const struct p2pt_transport *t,
                                           int device, uint32_t link[P2PT_LINKS]);

#endif /* P2PT_ROUTER_H */
