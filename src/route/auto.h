/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The `auto` policy (route_auto.c): per operation, the engine a crossover
 * table (auto_table.h) names for the stream's GPU architecture.
 */
#ifndef P2PT_AUTO_H
#define P2PT_AUTO_H

#include "config.h"
#include "request.h" /* P2PT_LINKS */

struct p2pt_auto;
struct p2pt_handle;
struct p2pt_policy;

P2PT_INTERNAL extern const struct p2pt_policy p2pt__policy_auto;

/* The built-in tables and, when cfg names one, the table file, parsed and
 * checked against the registry (CUDA-free: p2pt_init calls it before it
 * loads the driver, so a bad file is reported on any machine). */
P2PT_INTERNAL p2pt_status p2pt__auto_load(const struct p2pt_config *cfg, struct p2pt_auto **out);
P2PT_INTERNAL void p2pt__auto_free(struct p2pt_auto *a);
/* After the driver is loaded: a table file must match the architecture of
 * a visible GPU; logs the tables in use (INFO). */
P2PT_INTERNAL p2pt_status p2pt__auto_check_machine(struct p2pt_handle *h);

/* The CTAs that saturate the host link of `device` in each direction
 * ({h2d, d2h}; 0: no cap): the `link` lines of the built-in table for its
 * architecture (looked up once per process and device), for policies
 * without a table of their own; auto reads the table the device uses. A
 * policy input: the router hands them to kernel engines. */
P2PT_INTERNAL p2pt_status p2pt__auto_builtin_link_ctas(int device, uint32_t out[P2PT_LINKS]);

#endif /* P2PT_AUTO_H */
