/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one pass over a host batch's descriptors (batch_scan.c): each piece's
 * arguments, with validation on its facts for the chosen engine, and the
 * non-empty pieces written out in the kernel's layout, all in the same
 * loop. An engine that fills a buffer (the TMA batch's staging ring or
 * kernel parameters) makes this its only pass; the pipeline runs it without
 * output for every other engine and for dry runs, so a refusal is the same
 * piece and the same words whoever runs it.
 */
#ifndef P2PT_BATCH_SCAN_H
#define P2PT_BATCH_SCAN_H

#include "batch.h"

struct p2pt_handle;
struct p2pt_transport;
struct p2pt_coalesce;

/*
 * Pass over b->descs[0 .. b->count). Always: each piece's arguments (NULL
 * with bytes, wrap-around, overlap, more than size_t). When `t` is not NULL
 * and validation is on: each piece's sides against what `t` can reach
 * (inside the windows registered for b->device by a range check, elsewhere
 * located through a memo of the allocations the batch touches, one pointer
 * query each; the stream's context is current). With b->link set, each
 * piece's host-link direction is counted (b->h2d, b->d2h) whatever
 * validation says. When `out` is not
 * NULL (room for b->count): the non-empty pieces in order, and *tiles their
 * P2PT_BATCH_TILES. Sets b->pieces, b->bytes and b->scanned; on a refusal
 * b->refused, and the error names the piece.
 */
P2PT_INTERNAL p2pt_status p2pt__batch_scan(const struct p2pt_handle *h, struct p2pt_batch *b,
                                           const struct p2pt_transport *t,
                                           struct p2pt_batch_desc *out, uint64_t *tiles);

/*
 * The same pass for the copy engine: every piece located (through the
 * windows or the batch's allocation memo, also with validation off: a group
 * must not span two allocations), checked when validation is on, and added
 * to `groups` (p2pt__coalesce_init'ed, room for b->count), which is closed
 * at the end.
 */
P2PT_INTERNAL p2pt_status p2pt__batch_scan_groups(const struct p2pt_handle *h,
                                                  struct p2pt_batch *b,
                                                  const struct p2pt_transport *t,
                                                  struct p2pt_coalesce *groups);

#endif /* P2PT_BATCH_SCAN_H */
