/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Registered windows: the memory a device-descriptor batch may touch, per
 * handle and device, and the cheap range check that host batches use for
 * pieces inside them instead of a driver query per piece.
 *
 * A window is checked once, at registration, the way a copy's addresses
 * are (CUDA memory, mapped for the device, inside one allocation); after
 * that a range inside it needs no driver call. Each device's windows are an
 * immutable sorted snapshot swapped in under the handle's lock, so readers
 * never lock. A replaced snapshot is freed once no operation can hold it:
 * operations count themselves in and out (p2pt__windows_enter, _leave), and
 * a writer that has swapped a snapshot in and then finds none counted frees
 * those replaced. Both sides are sequentially consistent: a reader counted
 * after the writer looked loads the new snapshot, one counted before keeps
 * the old ones alive. A framework that registers and unregisters a window
 * a step keeps no more than what its in-flight operations read.
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "request.h"
#include "windows.h"

void p2pt__windows_init(struct p2pt_windows *w)
{
    pthread_mutex_init(&w->lock, NULL);
    for (int d = 0; d < P2PT_MAX_DEVICES; d++)
        atomic_init(&w->set[d], NULL);
    atomic_init(&w->readers, 0);
}

void p2pt__windows_enter(struct p2pt_windows *w) { atomic_fetch_add(&w->readers, 1); }

void p2pt__windows_leave(struct p2pt_windows *w) { atomic_fetch_sub(&w->readers, 1); }

const struct p2pt_window_set *p2pt__windows(const struct p2pt_windows *w, int device)
{
    if (device < 0 || device >= P2PT_MAX_DEVICES)
        return NULL;
    /* Sequentially consistent, against publish's look at the readers. */
    return atomic_load(&((struct p2pt_windows *)w)->set[device]);
}

static void free_chain(struct p2pt_window_set *ws)
{
    while (ws != NULL) {
        struct p2pt_window_set *older = ws->retired;
        free(ws);
        ws = older;
    }
}

size_t p2pt__windows_retained(struct p2pt_windows *w)
{
    size_t n = 0;
    pthread_mutex_lock(&w->lock);
    for (int d = 0; d < P2PT_MAX_DEVICES; d++) {
        const struct p2pt_window_set *ws = atomic_load(&w->set[d]);
        for (ws = ws != NULL ? ws->retired : NULL; ws != NULL; ws = ws->retired)
            n++;
    }
    pthread_mutex_unlock(&w->lock);
    return n;
}

int p2pt__window_search(const struct p2pt_window_set *ws, uint64_t a, uint64_t n)
{
    /* The last window whose base is <= a. */
    int lo = 0, hi = ws->n;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (ws->w[mid].base <= a)
            lo = mid;
        else
            hi = mid;
    }
    /* Windows may overlap: look back over those that start before a. */
    for (int i = lo; i >= 0; i--)
        if (ws->w[i].base <= a && a + n <= ws->w[i].end)
            return i;
    return -1;
}

void p2pt__windows_free(struct p2pt_windows *w)
{
    for (int d = 0; d < P2PT_MAX_DEVICES; d++) {
        free_chain(atomic_load(&w->set[d]));
        atomic_store(&w->set[d], NULL);
    }
    pthread_mutex_destroy(&w->lock);
}

/* [base, base + bytes) must be memory `device` reaches, inside one
 * allocation, as the device's current or primary context sees it. */
static p2pt_status check_window(int device, const void *base, size_t bytes, bool *host,
                                bool *peer)
{
    p2pt_status st = P2PT_SUCCESS;
    CUcontext ctx;
    bool pushed = false;
    struct p2pt_side side;

    P2PT_TRY(p2pt__ctx_enter(device, &ctx, &pushed));
    P2PT_TRY(p2pt__check_range("p2pt_window_register: window", base, bytes, device, &side));
    *host = side.host;
    *peer = side.device >= 0 && side.device != device;
out:
    p2pt__ctx_leave(pushed);
    return st;
}

/* Entry j of `to`: a window and what the set knows of it. */
static void put(struct p2pt_window_set *to, int j, struct p2pt_batch_window w, bool host,
                bool peer, bool import)
{
    to->w[j] = w;
    to->host[j] = host;
    to->peer[j] = peer;
    to->import[j] = import;
}

/* Entry j of `to`: entry i of `from`, as it was. */
static void keep(struct p2pt_window_set *to, int j, const struct p2pt_window_set *from, int i)
{
    put(to, j, from->w[i], from->host[i], from->peer[i], from->import[i]);
}

/* Swap in `next` for `device` (caller holds the lock); free what it
 * replaced where no operation is counted in. */
static void publish(struct p2pt_windows *w, int device, struct p2pt_window_set *next)
{
    next->retired = atomic_load(&w->set[device]);
    atomic_store(&w->set[device], next);
    if (atomic_load(&w->readers) == 0) {
        free_chain(next->retired);
        next->retired = NULL;
    }
}

p2pt_status p2pt__window_add(struct p2pt_windows *w, int device, const void *base, size_t bytes,
                             bool other_gpu, bool import)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_window_set *next = NULL;
    bool locked = false;

    P2PT_TRY(p2pt__check_device(device, "device"));
    if (device >= P2PT_MAX_DEVICES) {
        st = p2pt__fail(P2PT_NOT_SUPPORTED, "p2pt_window_register: device %d; p2pt keeps "
                                            "windows for devices 0..%d",
                        device, P2PT_MAX_DEVICES - 1);
        goto out;
    }
    if (base == NULL || bytes == 0 || (uintptr_t)base + bytes < (uintptr_t)base) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_window_register: base %p, %zu bytes: expected a non-NULL base "
                        "and 1 or more bytes that do not wrap around",
                        base, bytes);
        goto out;
    }
    bool host = false, peer = false;
    P2PT_TRY(check_window(device, base, bytes, &host, &peer));
    peer = peer || other_gpu;
    pthread_mutex_lock(&w->lock);
    locked = true;
    const struct p2pt_window_set *cur = atomic_load(&w->set[device]);
    int n = cur ? cur->n : 0;
    for (int i = 0; i < n; i++) {
        if (cur->w[i].base == (uint64_t)(uintptr_t)base) {
            st = p2pt__fail(P2PT_INVALID_USAGE,
                            "p2pt_window_register: %p is already a window of device %d; "
                            "unregister it first",
                            base, device);
            goto out;
        }
    }
    if (n == P2PT_BATCH_MAX_WINDOWS) {
        st = p2pt__fail(P2PT_INVALID_USAGE,
                        "p2pt_window_register: device %d already has %d windows, the most a "
                        "handle keeps per device; register larger ranges",
                        device, P2PT_BATCH_MAX_WINDOWS);
        goto out;
    }
    next = calloc(1, sizeof(*next));
    if (next == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        goto out;
    }
    /* Insert in base order. */
    uint64_t b = (uint64_t)(uintptr_t)base;
    const struct p2pt_batch_window added = {b, b + bytes};
    int j = 0;
    for (int i = 0; i < n; i++) {
        if (j == i && cur->w[i].base > b)
            put(next, j++, added, host, peer, import);
        keep(next, j++, cur, i);
    }
    if (j == n)
        put(next, j++, added, host, peer, import);
    next->n = j;
    next->n_peer = (cur ? cur->n_peer : 0) + peer;
    publish(w, device, next);
    next = NULL;
out:
    if (locked)
        pthread_mutex_unlock(&w->lock);
    free(next);
    return st;
}

p2pt_status p2pt__window_remove(struct p2pt_windows *w, int device, const void *base,
                                bool import)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_window_set *next = NULL;
    bool locked = false;

    if (device < 0 || device >= P2PT_MAX_DEVICES) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_window_unregister: device %d has no windows", device);
        goto out;
    }
    pthread_mutex_lock(&w->lock);
    locked = true;
    const struct p2pt_window_set *cur = atomic_load(&w->set[device]);
    int n = cur ? cur->n : 0, at = -1;
    for (int i = 0; i < n && at < 0; i++)
        if (cur->w[i].base == (uint64_t)(uintptr_t)base)
            at = i;
    if (at < 0) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_window_unregister: %p is not a window of device %d", base,
                        device);
        goto out;
    }
    if (cur->import[at] && !import) {
        st = p2pt__fail(P2PT_INVALID_USAGE,
                        "p2pt_window_unregister: %p is the window of an import of device %d "
                        "(p2pt_share_import): close the import with p2pt_share_close, which "
                        "removes its window once the work queued on it is done",
                        base, device);
        goto out;
    }
    next = calloc(1, sizeof(*next));
    if (next == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        goto out;
    }
    for (int i = 0, j = 0; i < n; i++) {
        if (i == at)
            continue;
        keep(next, j++, cur, i);
    }
    next->n = n - 1;
    next->n_peer = cur->n_peer - cur->peer[at];
    publish(w, device, next);
    next = NULL;
out:
    if (locked)
        pthread_mutex_unlock(&w->lock);
    free(next);
    return st;
}
