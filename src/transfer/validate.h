/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Validation (validate.c), the step after routing: with
 * P2P_TRANSPORT_VALIDATE=1, refuse an operation whose resolved facts the
 * chosen engine cannot cope with, with status 4 and the remedy. With
 * validation off every function here returns success at once.
 */
#ifndef P2PT_VALIDATE_H
#define P2PT_VALIDATE_H

#include "batch.h"

struct p2pt_handle;
struct p2pt_transport;

/* One request's sides against what engine `t` can reach. */
P2PT_INTERNAL p2pt_status p2pt__validate_copy(const struct p2pt_handle *h,
                                              const struct p2pt_request *r,
                                              const struct p2pt_transport *t);
/* Piece i of a host batch, `d` as the pass read it (these take the piece,
 * never read the caller's array again: what is checked is what is moved),
 * outside the registered windows: both sides located through the batch's
 * memo (*dst, *src; hints[] the memo slots the two sides were last found
 * in); the stream's context is current. A failed lookup names the piece. */
struct p2pt_alloc_memo;
P2PT_INTERNAL p2pt_status p2pt__piece_sides(const struct p2pt_batch *b, size_t i,
                                            const p2pt_copy_desc *d,
                                            struct p2pt_alloc_memo *memo, int hints[2],
                                            struct p2pt_side *dst, struct p2pt_side *src);
/* Piece i of a host batch, `d`, with sides `dst` and `src`, refused when a side
 * runs past the end of its allocation or is memory the engine cannot
 * reach: memory only the copy engine moves passes when `staged` (see
 * p2pt__refuse, `fallback` as there). The message names the piece. A host
 * batch's pieces are validated in the pass over them (batch_scan.c), those
 * inside windows by a range check. */
P2PT_INTERNAL p2pt_status p2pt__piece_check(const struct p2pt_batch *b, size_t i,
                                            const p2pt_copy_desc *d, bool staged,
                                            const char *fallback, const struct p2pt_side *dst,
                                            const struct p2pt_side *src);
/* A device batch's three buffers: memory of its device, inside one
 * allocation each (remembered per thread, so a replayed batch is checked
 * once). */
P2PT_INTERNAL p2pt_status p2pt__validate_device_batch(const struct p2pt_handle *h,
                                                      const struct p2pt_device_batch *b);
/* A device batch's signals: each semaphore memory the stream's device
 * reaches (under P2P_TRANSPORT_VALIDATE). */
P2PT_INTERNAL p2pt_status p2pt__validate_batch_signals(const struct p2pt_handle *h,
                                                       const struct p2pt_device_batch *b);
/* A signal's semaphore: memory the stream's device reaches; a wait's, the
 * stream's device's own memory (under P2P_TRANSPORT_VALIDATE). */
struct p2pt_signal;
P2PT_INTERNAL p2pt_status p2pt__validate_signal(const struct p2pt_handle *h,
                                                const struct p2pt_signal *s);
/*
 * Refuse a request whose facts an engine cannot cope with, naming it. An
 * engine that stages (`staged`: P2PT_CAP_STAGED) lets the driver stage
 * memory the stream's device cannot map (the copy engine does; a kernel
 * would fault). A remedy names engine `fallback` (the configuration's: the
 * registry's engine that runs any request).
 */
P2PT_INTERNAL p2pt_status p2pt__refuse(const struct p2pt_request *r, bool staged,
                                       const char *fallback);

#endif /* P2PT_VALIDATE_H */
