/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the TMA transport's files share (transport_tma.c: single copies;
 * transport_tma_batch.c: batches; transport_tma_ring.c: the host batches'
 * staging ring; transport_tma_link.c: batches across links; tma_settings.c:
 * its settings).
 */
#ifndef P2PT_TMA_H
#define P2PT_TMA_H

#include "launch.h"
#include "registry.h"
#include "tma_settings.h"

/* The TMA transport's kernels and their entry points, in entries order. */
P2PT_INTERNAL extern const struct p2pt_kernel p2pt__kernel_tma_copy;    /* kernels/tma_copy.cu */
P2PT_INTERNAL extern const struct p2pt_kernel p2pt__kernel_stream_copy; /* kernels/stream_copy.cu */
P2PT_INTERNAL extern const struct p2pt_kernel p2pt__kernel_batch_copy;  /* kernels/batch_copy.cu */
P2PT_INTERNAL extern const struct p2pt_kernel p2pt__kernel_link_copy;   /* kernels/link_copy.cu */
P2PT_INTERNAL extern const struct p2pt_kernel p2pt__kernel_signal;      /* kernels/signal.cu */
enum { P2PT_TMA_ENTRY_COPY };
enum { P2PT_STREAM_ENTRY_COPY };
enum { P2PT_LINK_ENTRY_COPY };
enum { P2PT_SIGNAL_ENTRY_SIGNAL, P2PT_SIGNAL_ENTRY_WAIT, P2PT_SIGNAL_ENTRY_COUNT };
enum {
    P2PT_BATCH_ENTRY_SMALL,
    P2PT_BATCH_ENTRY_LARGE,
    P2PT_BATCH_ENTRY_DEVICE,
    P2PT_BATCH_ENTRY_RING,
    P2PT_BATCH_ENTRY_EXPAND, /* blocks in GPU memory into a device batch's descriptors */
    P2PT_BATCH_ENTRY_MARKS   /* a device batch in parts that signal apart */
};

/* The TMA engine's counters, kept in its per-handle state and reported in
 * p2pt_properties (tma_launches, stream_launches, batch_launches). */
struct p2pt_tma_counters {
    _Atomic uint64_t launches, stream_launches, batch_launches;
};
P2PT_INTERNAL struct p2pt_tma_counters *p2pt__tma_counters(const struct p2pt_handle *h);
/* What its settings say about every launch it makes (launch.c). */
P2PT_INTERNAL const struct p2pt_launch_settings *p2pt__tma_launch(const struct p2pt_handle *h);
/* The CTAs one copy launch may use on the module's device under this
 * handle's configuration, kept per (handle, device) (status 4 when the ring
 * does not fit its shared memory). */
P2PT_INTERNAL p2pt_status p2pt__tma_grid(struct p2pt_handle *h, const struct p2pt_module *m,
                                         uint32_t *grid);
/* A batch's place in its context's staging ring (transport_tma_ring.c),
 * from the sink to release. */
struct p2pt_tma_slot {
    void *ring;      /* NULL: none taken */
    size_t at, need; /* the slot: [at, at + need) of the ring */
    size_t ready_at; /* descriptors read in place: where their ready words start */
    bool blocks;     /* the mapping's rows and a record per layer, not descriptors */
};
/* A signal or a wait (transport_tma_signal.c). */
P2PT_INTERNAL p2pt_status p2pt__tma_signal(struct p2pt_handle *h, const struct p2pt_signal *s);
/* The host-batch hooks (transport_tma_batch.c): where the pieces go (the
 * staging ring, the kernel parameters, or a buffer for more than one
 * launch's worth), their launch, and giving the ring's slot back. */
P2PT_INTERNAL p2pt_status p2pt__tma_batch_sink(struct p2pt_handle *h, const struct p2pt_batch *b,
                                               struct p2pt_batch_sink *s);
P2PT_INTERNAL p2pt_status p2pt__tma_batch_submit(struct p2pt_handle *h,
                                                 const struct p2pt_batch *b,
                                                 struct p2pt_batch_sink *s);
P2PT_INTERNAL void p2pt__tma_batch_release(struct p2pt_handle *h, struct p2pt_batch_sink *s);
/* `most` CTAs, or fewer when every piece of passed batch `b` crosses a
 * link (p2pt__batch_link_cap). */
P2PT_INTERNAL unsigned p2pt__tma_link_grid(const struct p2pt_batch *b, unsigned most);
/* The launch settings for passed batch `b`: the engine's, without
 * programmatic dependent launch where a link caps its CTAs. */
P2PT_INTERNAL struct p2pt_launch_settings p2pt__tma_batch_launch(const struct p2pt_handle *h,
                                                                 const struct p2pt_batch *b);
/* The link kernel's grid for passed batch `b` under `most` CTAs: a warp a
 * piece, up to the link's cap and P2PT_LINK_SLOTS warps. */
P2PT_INTERNAL unsigned p2pt__tma_link_kernel_grid(const struct p2pt_batch *b, unsigned most);
/* Whether passed batch `b` takes the link kernel (kernels/link_copy.cu)
 * when the staging ring serves it and a launch may use `most` CTAs, and
 * if not, why: every piece crosses the host link in a direction
 * P2PT_LINK_DIRS names, co-aligned, more than the parameters' small batch
 * (else NOT_FOR_IT), on all the link's CTAs (else NARROW), pieces of
 * P2PT_LINK_MIN_MEAN or more on average (else SMALL), and no warp dealt
 * more than P2PT_LINK_HEAVIEST times its share of the bytes, from the
 * slots the pass summed, `spread` (else UNEVEN; slots not summed:
 * NOT_FOR_IT). *heavy (may be NULL): the heaviest warp's bytes over its
 * share where that was worked out, else 0. */
enum p2pt_link_choice {
    P2PT_LINK_KERNEL,
    P2PT_LINK_NOT_FOR_IT,
    P2PT_LINK_NARROW,
    P2PT_LINK_SMALL,
    P2PT_LINK_UNEVEN,
};
P2PT_INTERNAL enum p2pt_link_choice p2pt__tma_link_choice(const struct p2pt_batch *b,
                                                          const uint64_t *spread, unsigned most,
                                                          double *heavy);
/* The batch_describe hook: the CTAs and kernel of a passed batch across
 * links, in words. */
P2PT_INTERNAL void p2pt__tma_batch_describe(const struct p2pt_handle *h,
                                            const struct p2pt_batch *b,
                                            const struct p2pt_batch_sink *s, char *why,
                                            size_t len);
/* A slot of the context's staging ring for host batch `b` (more than
 * P2PT_BATCH_SMALL pieces): taken, with the ring locked until
 * p2pt__tma_ring_close, and sink `s` pointed at it (descriptors, or the
 * mapping's rows of blocks the kernels make the pieces of, unless
 * s->as_descs). *got false (status success): the ring cannot take it
 * (capture, too large, no ring here); use the parameters. */
P2PT_INTERNAL p2pt_status p2pt__tma_ring_open(struct p2pt_handle *h, const struct p2pt_batch *b,
                                              struct p2pt_batch_sink *s,
                                              struct p2pt_tma_slot *slot, bool *got);
/* The batch in `slot`, every piece passed: one launch of up to `most`
 * CTAs, of the batch kernel (module `m`) or, where `lm` (the link kernel's
 * module) is given and p2pt__tma_link_choice says so from the pass's
 * `spread`, of the link kernel; the slot busy until that launch
 * completes. */
P2PT_INTERNAL p2pt_status p2pt__tma_ring_submit(struct p2pt_handle *h, const struct p2pt_batch *b,
                                                struct p2pt_tma_slot *slot,
                                                const struct p2pt_module *m,
                                                const struct p2pt_module *lm,
                                                const uint64_t *spread, unsigned most);
/* Unlock the ring of `slot` (a slot not submitted stays free). */
P2PT_INTERNAL void p2pt__tma_ring_close(struct p2pt_tma_slot *slot);
/* A device batch; one of blocks (b->blocks) first has its descriptors
 * written into its workspace by the expand kernel, on the same stream. */
P2PT_INTERNAL p2pt_status p2pt__tma_copy_batch_device(struct p2pt_handle *h,
                                                      const struct p2pt_device_batch *b);

#endif /* P2PT_TMA_H */
