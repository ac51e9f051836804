/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address ranges whose bytes live on another GPU than the driver names
 * (elsewhere.h). A few ranges a process (one per import of another GPU's
 * export), asked once per allocation an operation touches: a list under a
 * read-write lock, and a count that lets a process without imports skip
 * the lock.
 */
#include <stdlib.h>

#include "elsewhere.h"

struct range {
    const void *owner;
    uint64_t start, end;
    int device;
};

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static struct range *ranges;
static size_t n, cap;
static atomic_size_t live;

p2pt_status p2pt__elsewhere_add(const void *owner, uint64_t start, uint64_t bytes, int device)
{
    p2pt_status st = P2PT_SUCCESS;
    pthread_rwlock_wrlock(&lock);
    if (n == cap) {
        size_t want = cap ? 2 * cap : 16;
        struct range *more = realloc(ranges, want * sizeof(*more));
        if (more == NULL) {
            st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
            goto out;
        }
        ranges = more;
        cap = want;
    }
    ranges[n++] = (struct range){owner, start, start + bytes, device};
    atomic_store(&live, n);
out:
    pthread_rwlock_unlock(&lock);
    return st;
}

void p2pt__elsewhere_remove(const void *owner)
{
    if (atomic_load(&live) == 0)
        return;
    pthread_rwlock_wrlock(&lock);
    for (size_t i = 0; i < n;)
        if (ranges[i].owner == owner)
            ranges[i] = ranges[--n];
        else
            i++;
    atomic_store(&live, n);
    pthread_rwlock_unlock(&lock);
}

int p2pt__elsewhere_find(uint64_t addr)
{
    int device = -1;
    if (atomic_load(&live) == 0)
        return -1;
    pthread_rwlock_rdlock(&lock);
    for (size_t i = 0; i < n && device < 0; i++)
        if (ranges[i].start <= addr && addr < ranges[i].end)
            device = ranges[i].device;
    pthread_rwlock_unlock(&lock);
    return device;
}
