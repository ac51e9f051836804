/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address ranges whose bytes live on another GPU than the driver names for
 * them (elsewhere.c): imports of another GPU's export. A legacy IPC handle
 * opened in device 0's context reads as device 0's memory though its bytes
 * are on the exporter's GPU (docs/IMPORTED_MEMORY.md); p2pt__locate asks
 * here so that a piece into it counts as crossing the peer link, as the
 * same piece does in one process. Process-wide, as addresses are: the
 * share module adds a range when it maps an import and removes it before
 * it unmaps.
 */
#ifndef P2PT_ELSEWHERE_H
#define P2PT_ELSEWHERE_H

#include "common.h"

/* [start, start + bytes) holds memory of GPU `device` (this process's
 * ordinal), for as long as `owner` (the import) lives. */
P2PT_INTERNAL p2pt_status p2pt__elsewhere_add(const void *owner, uint64_t start, uint64_t bytes,
                                              int device);
/* Every range of `owner`; nothing if it has none. */
P2PT_INTERNAL void p2pt__elsewhere_remove(const void *owner);
/* The GPU whose memory holds `addr` by a range above, or -1. */
P2PT_INTERNAL int p2pt__elsewhere_find(uint64_t addr);

#endif /* P2PT_ELSEWHERE_H */
