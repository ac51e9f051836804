/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dry run every p2pt_explain_* entry point shares (explain.c).
 */
#ifndef P2PT_EXPLAIN_H
#define P2PT_EXPLAIN_H

#include "operation.h"

/* The dry run of `op`: the handle and `choice` checked, then the same
 * pipeline as the real call, stopped before the engine, its choice copied
 * out into what `choice->size` covers. */
P2PT_INTERNAL p2pt_status p2pt__dry_run(p2pt_handle *h, struct p2pt_op *op, p2pt_choice *choice);

#endif /* P2PT_EXPLAIN_H */
