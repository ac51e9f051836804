/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the calibrate mode's files share: calibrate_lists.c measures and
 * builds the lists of one path; mode_calibrate.c asks it for the paths
 * between GPUs and writes the table; calibrate_host.c sets up pinned host
 * memory and asks it for the h2d and d2h lists.
 */
#ifndef P2PT_BENCH_CALIBRATE_H
#define P2PT_BENCH_CALIBRATE_H

#include "auto_table.h"
#include "bench.h"

#define CAL_BATCH_COUNT 64       /* pieces per calibration batch */
#define CAL_BATCH_MAX (4 * MiB)  /* largest piece */
#define CAL_BATCH_GAP (4 * KiB)  /* between destination pieces */
/* Bytes one set of the largest pieces spans on either side. */
#define CAL_BATCH_LARGEST (CAL_BATCH_COUNT * (CAL_BATCH_MAX + CAL_BATCH_GAP))

/* Copies of 4K..-e (x2) on `d`, both engines, back to back and queued
 * behind a gate: the copy list and, where it differs, the graph list (else
 * the graph list is left empty). `what` names the path in output. */
void cal_copy_lists(struct bench_dir *d, const char *what, struct p2pt_auto_list *copy,
                    struct p2pt_auto_list *graph);
/* Batches of CAL_BATCH_COUNT pieces of 4K..4M (x4) from d->src to d->dst,
 * whose pools hold `pool` bytes (at least CAL_BATCH_LARGEST): the batch
 * list. */
void cal_batch_list(const struct bench_dir *d, size_t pool, const char *what,
                    struct p2pt_auto_list *out);
/* The h2d and d2h copy, graph and batch lists (calibrate_host.c). */
void cal_host(struct p2pt_auto_table *tab);

#endif /* P2PT_BENCH_CALIBRATE_H */
