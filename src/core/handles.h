/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry of live handles (handle.c): every entry point checks its
 * handle here before it reads through it.
 */
#ifndef P2PT_HANDLES_H
#define P2PT_HANDLES_H

#include "handle.h"

/*
 * A new handle for `cfg`, registered as live (no driver needed: tests make
 * handles without one; for auto it parses the crossover tables, so a bad
 * table file fails here, before p2pt_init loads the driver).
 * P2PT_INVALID_USAGE past P2PT_MAX_HANDLES live handles.
 */
P2PT_INTERNAL p2pt_status p2pt__handle_new(const struct p2pt_config *cfg,
                                           p2pt_logger_t logger, struct p2pt_handle **out);
/* Unregister and free; false when `h` was not live (nothing is touched). */
P2PT_INTERNAL bool p2pt__handle_free(struct p2pt_handle *h);
/*
 * NULL: P2PT_INVALID_ARGUMENT; not a live handle (never initialized or
 * finalized): P2PT_INVALID_USAGE. Decided from the registry without reading
 * through `h`, so a finalized handle's freed memory is never touched. `fn`
 * names the caller in the message.
 */
P2PT_INTERNAL p2pt_status p2pt__check_handle(const p2pt_handle *h, const char *fn);

#endif /* P2PT_HANDLES_H */
