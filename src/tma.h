/*
 * What the TMA transport's two files share (transport_tma.c: single
 * copies; transport_tma_batch.c: batches).
 */
#ifndef P2PT_TMA_H
#define P2PT_TMA_H

#include "handle.h"
#include "jit.h"

/* The CTAs one launch may use on the module's device under this handle's
 * configuration (status 4 when the ring does not fit its shared memory). */
P2PT_INTERNAL p2pt_status p2pt__tma_grid(struct p2pt_handle *h, const struct p2pt_module *m,
                                         uint32_t *grid);
/* Launch `fn` on `stream`, with programmatic dependent launch when the
 * handle asks for it and the driver has cuLaunchKernelEx. */
P2PT_INTERNAL p2pt_status p2pt__tma_launch(const struct p2pt_handle *h, CUfunction fn,
                                           unsigned grid, unsigned block, unsigned smem,
                                           CUstream stream, void **params);

P2PT_INTERNAL p2pt_status p2pt__tma_copy_batch(struct p2pt_handle *h, const struct p2pt_batch *b);
P2PT_INTERNAL p2pt_status p2pt__tma_copy_batch_device(struct p2pt_handle *h,
                                                      const struct p2pt_device_batch *b);

#endif /* P2PT_TMA_H */
