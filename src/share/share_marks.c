/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What lets a close wait for the work queued on a window without a
 * stream of its own to wait on: while a device has imports open, every
 * operation the handle enqueues on a stream of that device records one
 * event on that stream, reused at each operation (a stream runs in order,
 * so its latest event covers all of its earlier work). A close then
 * synchronizes the events of the streams that took work since its import.
 * Cheap, and only while imports are open: a handle with none pays one
 * atomic load per operation.
 *
 * A stream whose event cannot be made or recorded is waited for as its
 * whole context; when the table is full the device's primary context is.
 * Work captured into a graph is not marked: its replays are later, and the
 * caller's to finish before the close (p2pt.h says so).
 */
#include <string.h>

#include "driver.h"
#include "handle.h"
#include "share.h"

void p2pt__share_mark(struct p2pt_handle *h, CUstream stream, CUcontext ctx, int device)
{
    struct p2pt_share *sh = atomic_load_explicit(&h->share, memory_order_acquire);
    if (sh == NULL || device < 0 || device >= P2PT_MAX_DEVICES ||
        atomic_load_explicit(&sh->open[device], memory_order_acquire) == 0)
        return;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (p2pt__cu.cuStreamIsCapturing(stream, &cs) == CUDA_SUCCESS &&
        cs != CU_STREAM_CAPTURE_STATUS_NONE)
        return;
    bool per_thread = stream == CU_STREAM_PER_THREAD;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&sh->marks_lock);
    struct p2pt_share_mark *m = NULL;
    for (int i = 0; i < sh->n_marks && m == NULL; i++)
        if (sh->marks[i].ctx == ctx && sh->marks[i].stream == stream &&
            (!per_thread || pthread_equal(sh->marks[i].thread, self)))
            m = &sh->marks[i];
    if (m == NULL && sh->n_marks == P2PT_SHARE_MARKS) {
        sh->overflow_seq[device] = ++sh->seq;
        pthread_mutex_unlock(&sh->marks_lock);
        return;
    }
    if (m == NULL) {
        m = &sh->marks[sh->n_marks++];
        memset(m, 0, sizeof(*m));
        m->ctx = ctx;
        m->stream = stream;
        m->thread = self;
        m->device = device;
        if (p2pt__cu.cuEventCreate == NULL ||
            p2pt__cu.cuEventCreate(&m->event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
            m->event = NULL;
    }
    m->wait_ctx = m->event == NULL || p2pt__cu.cuEventRecord == NULL ||
                  p2pt__cu.cuEventRecord(m->event, stream) != CUDA_SUCCESS;
    m->seq = ++sh->seq;
    pthread_mutex_unlock(&sh->marks_lock);
}

uint64_t p2pt__share_marks_now(struct p2pt_share *sh)
{
    pthread_mutex_lock(&sh->marks_lock);
    uint64_t now = sh->seq;
    pthread_mutex_unlock(&sh->marks_lock);
    return now;
}

/* Wait for one marked stream: its event, or its whole context. */
static p2pt_status wait_one(CUcontext ctx, CUevent event)
{
    p2pt_status st = P2PT_SUCCESS;
    bool pushed = false;
    if (event == NULL)
        P2PT_TRY(p2pt__share_needs(p2pt__cu.cuCtxSynchronize, "p2pt_share_close",
                                   "cuCtxSynchronize",
                                   "needed to wait for a stream whose event could not be "
                                   "recorded"));
    P2PT_CU(p2pt__cu.cuCtxPushCurrent(ctx));
    pushed = true;
    if (event != NULL)
        P2PT_CU(p2pt__cu.cuEventSynchronize(event));
    else
        P2PT_CU(p2pt__cu.cuCtxSynchronize());
out:
    p2pt__ctx_leave(pushed);
    return st;
}

p2pt_status p2pt__share_marks_wait(struct p2pt_share *sh, int device, uint64_t since)
{
    p2pt_status st = P2PT_SUCCESS;
    struct {
        CUcontext ctx;
        CUevent event;
    } todo[P2PT_SHARE_MARKS];
    int n = 0;
    bool primary = false;

    /* Copied out under the lock, waited for without it: the work being
     * waited for may be held up by a thread that is about to enqueue more. */
    pthread_mutex_lock(&sh->marks_lock);
    for (int i = 0; i < sh->n_marks; i++) {
        const struct p2pt_share_mark *m = &sh->marks[i];
        if (m->device != device || m->seq <= since)
            continue;
        todo[n].ctx = m->ctx;
        todo[n].event = m->wait_ctx || p2pt__cu.cuEventSynchronize == NULL ? NULL : m->event;
        n++;
    }
    primary = sh->overflow_seq[device] > since;
    pthread_mutex_unlock(&sh->marks_lock);
    for (int i = 0; i < n; i++)
        P2PT_TRY(wait_one(todo[i].ctx, todo[i].event));
    if (primary) {
        CUcontext ctx;
        bool pushed = false;
        P2PT_TRY(p2pt__ctx_enter_primary(device, &ctx, &pushed));
        p2pt__ctx_leave(pushed);
        P2PT_TRY(wait_one(ctx, NULL));
    }
out:
    return st;
}

void p2pt__share_marks_drop(struct p2pt_share *sh, int device)
{
    pthread_mutex_lock(&sh->marks_lock);
    int kept = 0;
    for (int i = 0; i < sh->n_marks; i++) {
        struct p2pt_share_mark *m = &sh->marks[i];
        if (device >= 0 && m->device != device) {
            sh->marks[kept++] = *m;
            continue;
        }
        /* Destroyed in its own context; one that fails is the driver's to
         * reclaim with the context. */
        if (m->event != NULL && p2pt__cu.cuEventDestroy != NULL &&
            p2pt__cu.cuCtxPushCurrent(m->ctx) == CUDA_SUCCESS) {
            p2pt__cu.cuEventDestroy(m->event);
            p2pt__ctx_leave(true);
        }
    }
    sh->n_marks = kept;
    for (int d = 0; d < P2PT_MAX_DEVICES; d++)
        if (device < 0 || d == device)
            sh->overflow_seq[d] = 0;
    pthread_mutex_unlock(&sh->marks_lock);
}
