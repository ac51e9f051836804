/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Registered windows: the memory a device-descriptor batch may touch, per
 * handle and device, and the cheap range check that host batches use for
 * pieces inside them instead of a driver query per piece.
 *
 * A window is checked once, at registration, the way a copy's addresses
 * are (CUDA memory, mapped for the device, inside one allocation); after
 * that a range inside it needs no driver call. Each device's windows are an
 * immutable sorted snapshot swapped in under the handle's lock; replaced
 * snapshots are kept until finalize, so readers never lock.
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
}

const struct p2pt_window_set *p2pt__windows(const struct p2pt_windows *w, int device)
{
    if (device < 0 || device >= P2PT_MAX_DEVICES)
        return NULL;
    return atomic_load_explicit(&((struct p2pt_windows *)w)->set[device], memory_order_acquire);
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
        struct p2pt_window_set *ws = atomic_load(&w->set[d]);
        while (ws != NULL) {
            struct p2pt_window_set *older = ws->retired;
            free(ws);
            ws = older;
        }
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

/* Swap in `next` for `device` (caller holds the lock). */
static void publish(struct p2pt_windows *w, int device, struct p2pt_window_set *next)
{
    next->retired = atomic_load(&w->set[device]);
    atomic_store_explicit(&w->set[device], next, memory_order_release);
}

p2pt_status p2pt__window_add(struct p2pt_windows *w, int device, const void *base, size_t bytes,
                             bool other_gpu)
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
    int j = 0;
    for (int i = 0; i < n; i++) {
        if (j == i && cur->w[i].base > b) {
            next->host[j] = host;
            next->peer[j] = peer;
            next->w[j++] = (struct p2pt_batch_window){b, b + bytes};
        }
        next->host[j] = cur->host[i];
        next->peer[j] = cur->peer[i];
        next->w[j++] = cur->w[i];
    }
    if (j == n) {
        next->host[j] = host;
        next->peer[j] = peer;
        next->w[j++] = (struct p2pt_batch_window){b, b + bytes};
    }
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

p2pt_status p2pt__window_remove(struct p2pt_windows *w, int device, const void *base)
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
    next = calloc(1, sizeof(*next));
    if (next == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        goto out;
    }
    for (int i = 0, j = 0; i < n; i++) {
        if (i == at)
            continue;
        next->host[j] = cur->host[i];
        next->peer[j] = cur->peer[i];
        next->w[j++] = cur->w[i];
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
