/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Argument checks that need no GPU: NULL handles and pointers, ranges that
 * wrap around the address space, overlapping ranges, bytes == 0, a batch
 * count no array holds - refused (or accepted) before any CUDA call, with
 * the values in the message; a handle that is not live is refused, and
 * finalize of NULL or of something never registered is a quiet no-op.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "p2pt_internal.h"

/* A live handle made without a driver (p2pt_init needs one): what the
 * entry points do before any CUDA call is the same. */
static p2pt_handle *live_handle(void)
{
    struct p2pt_config cfg;
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt__handle_new(&cfg, NULL, &h), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    return h;
}

static p2pt_status check(void *dst, const void *src, size_t bytes)
{
    return p2pt__check_args(dst, src, bytes);
}

Test(args, null_handle_and_null_outputs_are_status_4)
{
    char buf[32] = {0};
    cr_assert_eq(p2pt_copy_async(NULL, buf, buf + 16, 8, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "NULL") != NULL, "%s", p2pt_last_error(NULL));
    cr_assert_eq(p2pt_prepare(NULL, 0), P2PT_INVALID_ARGUMENT);
    p2pt_properties p = {sizeof(p)};
    cr_assert_eq(p2pt_get_properties(NULL, &p), P2PT_INVALID_ARGUMENT);
    p2pt_handle *h = live_handle();
    cr_assert_eq(p2pt_get_properties(h, NULL), P2PT_INVALID_ARGUMENT);
    p2pt_finalize(h);
    cr_assert_eq(p2pt_init(NULL, NULL), P2PT_INVALID_ARGUMENT);
    p2pt_init_args a = {0, NULL, NULL}; /* size not set */
    p2pt_handle *out = NULL;
    cr_assert_eq(p2pt_init(&a, &out), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "sizeof(p2pt_init_args)") != NULL);
}

Test(args, a_never_initialized_handle_is_refused_not_used)
{
    /* Never registered: refused from the registry, its bytes never read
     * (they are junk on purpose). */
    static unsigned char junk[4096];
    memset(junk, 0x5a, sizeof(junk));
    char buf[64] = {0};
    cr_assert_eq(p2pt_copy_async((p2pt_handle *)junk, buf, buf + 32, 8, NULL),
                 P2PT_INVALID_USAGE);
    cr_assert(strstr(p2pt_last_error(NULL), "not a live p2pt handle") != NULL);
}

/* Every entry point that takes a handle answers alike: NULL is status 4, a
 * finalized handle is status 5, each naming the function. The finalized
 * handle's memory is really freed: under AddressSanitizer (scripts/test.sh)
 * any read through it would fail this test. */
Test(args, every_entry_point_refuses_null_and_dead_handles_alike)
{
    p2pt_properties props = {sizeof(props)};
    p2pt_topology_t topo;
    memset(&topo, 0, sizeof(topo));
    topo.size = sizeof(topo);
    char buf[64] = {0};
    for (int dead = 0; dead < 2; dead++) {
        p2pt_handle *h = NULL;
        if (dead) {
            h = live_handle();
            cr_assert_eq(p2pt_finalize(h), P2PT_SUCCESS);
        }
        p2pt_status want = dead ? P2PT_INVALID_USAGE : P2PT_INVALID_ARGUMENT;
        struct {
            const char *name;
            p2pt_status got;
        } calls[] = {
            {"p2pt_get_properties", p2pt_get_properties(h, &props)},
            {"p2pt_prepare", p2pt_prepare(h, 0)},
            {"p2pt_copy_async", p2pt_copy_async(h, buf, buf + 32, 8, NULL)},
            {"p2pt_peer_enable", p2pt_peer_enable(h, 0, 1)},
            {"p2pt_topology", p2pt_topology(h, &topo)},
        };
        for (size_t i = 0; i < P2PT_ARRAY_LEN(calls); i++) {
            cr_assert_eq(calls[i].got, want, "%s(%s handle) -> %d, expected %d", calls[i].name,
                         dead ? "dead" : "NULL", (int)calls[i].got, (int)want);
        }
        /* The last call's message names it. */
        cr_assert(strstr(p2pt_last_error(NULL), "p2pt_topology") != NULL, "%s",
                  p2pt_last_error(NULL));
    }
}

Test(args, finalize_null_twice_and_unknown_handles_succeed_quietly)
{
    cr_assert_eq(p2pt_finalize(NULL), P2PT_SUCCESS);
    p2pt_handle *h = live_handle();
    cr_assert_eq(p2pt_finalize(h), P2PT_SUCCESS);
    cr_assert_eq(p2pt_finalize(h), P2PT_SUCCESS); /* freed already: not touched again */
    static unsigned char junk[64];
    memset(junk, 0x5a, sizeof(junk));
    cr_assert_eq(p2pt_finalize((p2pt_handle *)junk), P2PT_SUCCESS); /* never registered */
    for (size_t i = 0; i < sizeof(junk); i++)
        cr_assert_eq(junk[i], 0x5a, "an unregistered handle was written at byte %zu", i);
}

Test(args, live_handles_past_the_limit_are_refused_with_status_5)
{
    static p2pt_handle *hs[P2PT_MAX_HANDLES];
    struct p2pt_config cfg;
    cr_assert_eq(p2pt__config_read(&cfg, NULL, NULL), P2PT_SUCCESS);
    int made = 0;
    p2pt_status st = P2PT_SUCCESS;
    while (made < P2PT_MAX_HANDLES && (st = p2pt__handle_new(&cfg, NULL, &hs[made])) == 0)
        made++;
    p2pt_handle *extra = NULL;
    if (st == P2PT_SUCCESS)
        st = p2pt__handle_new(&cfg, NULL, &extra);
    cr_assert_eq(st, P2PT_INVALID_USAGE, "handle %d -> %d", made + 1, (int)st);
    cr_assert(strstr(p2pt__last_error_text(), "handles are live") != NULL, "%s",
              p2pt__last_error_text());
    for (int i = 0; i < made; i++)
        p2pt_finalize(hs[i]);
    /* Room again once they are gone. */
    cr_assert_eq(p2pt__handle_new(&cfg, NULL, &extra), P2PT_SUCCESS);
    p2pt_finalize(extra);
}

Test(args, null_pointers_with_bytes_are_status_4_zero_bytes_succeed)
{
    char buf[64] = {0};
    cr_assert_eq(check(NULL, buf, 16), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt__last_error_text(), "16 bytes") != NULL, "%s", p2pt__last_error_text());
    cr_assert_eq(check(buf, NULL, 16), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(check(NULL, NULL, 0), P2PT_SUCCESS);
}

Test(args, ranges_that_wrap_around_are_status_4)
{
    void *top = (void *)(UINTPTR_MAX - 10);
    char buf[128] = {0};
    cr_assert_eq(check(top, buf, 100), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt__last_error_text(), "wraps") != NULL, "%s", p2pt__last_error_text());
    cr_assert_eq(check(buf, top, 100), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(check(buf, buf + 64, SIZE_MAX), P2PT_INVALID_ARGUMENT);
}

Test(args, overlapping_ranges_are_status_4_adjacent_ones_are_fine)
{
    char buf[256] = {0};
    cr_assert_eq(check(buf + 10, buf, 100), P2PT_INVALID_ARGUMENT);
    char want_dst[64], want_src[64];
    snprintf(want_dst, sizeof(want_dst), "%p", (void *)(buf + 10));
    snprintf(want_src, sizeof(want_src), "%p", (void *)buf);
    cr_assert(strstr(p2pt__last_error_text(), want_dst) != NULL, "names dst: %s",
              p2pt__last_error_text());
    cr_assert(strstr(p2pt__last_error_text(), want_src) != NULL, "names src: %s",
              p2pt__last_error_text());
    cr_assert_eq(check(buf, buf + 10, 100), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(check(buf, buf, 1), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(check(buf, buf + 100, 100), P2PT_SUCCESS);
    cr_assert_eq(check(buf + 100, buf, 100), P2PT_SUCCESS);
    /* One byte of overlap at either end is still overlap. */
    cr_assert_eq(check(buf + 99, buf, 100), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(check(buf, buf + 99, 100), P2PT_INVALID_ARGUMENT);
}

/* A count no array can hold (a negative count cast, n - 1 of an empty
 * list) is status 4 naming it, before a descriptor is read: the pass would
 * otherwise walk past the caller's array. */
Test(args, a_batch_count_no_array_holds_is_status_4_before_a_descriptor_is_read)
{
    const char *transports[] = {"ce", "tma", "auto"};
    for (size_t t = 0; t < sizeof(transports) / sizeof(transports[0]); t++) {
        setenv("P2P_TRANSPORT", transports[t], 1);
        p2pt_handle *h = live_handle();
        p2pt_copy_desc one[1] = {{NULL, NULL, 0}};
        const size_t counts[] = {SIZE_MAX, (size_t)-24,
                                 (size_t)PTRDIFF_MAX / sizeof(p2pt_copy_desc) + 1};
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            p2pt_choice c = {sizeof(c)};
            cr_assert_eq(p2pt_copy_batch_async(h, one, counts[k], NULL), P2PT_INVALID_ARGUMENT);
            char want[64];
            snprintf(want, sizeof(want), "count %zu: no array", counts[k]);
            cr_expect(strstr(p2pt_last_error(NULL), want) != NULL, "%s", p2pt_last_error(NULL));
            cr_assert_eq(p2pt_explain_batch(h, one, counts[k], NULL, &c), P2PT_INVALID_ARGUMENT);
            cr_expect(strstr(p2pt_last_error(NULL), want) != NULL, "%s: %s", transports[t],
                      p2pt_last_error(NULL));
        }
        p2pt_finalize(h);
    }
    unsetenv("P2P_TRANSPORT");
}

/* A device batch writes its workspace while it reads its descriptors and
 * count (its blocks: their mapping): sharing bytes is status 4 naming
 * both, checked on the host before anything is enqueued. */
Test(args, a_workspace_sharing_bytes_with_what_the_batch_reads_is_status_4)
{
    setenv("P2P_TRANSPORT", "tma", 1);
    p2pt_handle *h = live_handle();
    void *descs = (void *)(uintptr_t)0x100000, *count = (void *)(uintptr_t)0x200000;
    cr_assert_eq(p2pt_copy_batch_device_async(h, descs, count, 8,
                                              (void *)(uintptr_t)(0x100000 + 8 * 24 - 16), NULL),
                 P2PT_INVALID_ARGUMENT);
    cr_expect(strstr(p2pt_last_error(NULL), "overlaps descs") != NULL, "%s",
              p2pt_last_error(NULL));
    cr_assert_eq(p2pt_copy_batch_device_async(h, descs, (void *)(uintptr_t)0x300020, 8,
                                              (void *)(uintptr_t)0x300000, NULL),
                 P2PT_INVALID_ARGUMENT);
    cr_expect(strstr(p2pt_last_error(NULL), "overlaps count") != NULL, "%s",
              p2pt_last_error(NULL));
    p2pt_block_layer layer = {sizeof(layer), (void *)(uintptr_t)0x1000000,
                              (const void *)(uintptr_t)0x2000000, 4096, 8, 8};
    const size_t ws = p2pt_blocks_workspace_bytes(1, 2);
    cr_assert_eq(p2pt_copy_blocks_device_async(h, &layer, 1, (const int64_t *)(uintptr_t)0x400000,
                                               2, (void *)(uintptr_t)(0x400000 - ws + 16), NULL),
                 P2PT_INVALID_ARGUMENT);
    cr_expect(strstr(p2pt_last_error(NULL), "overlaps mapping") != NULL, "%s",
              p2pt_last_error(NULL));
    /* Next to each other is fine as far as these checks go. */
    p2pt_status st = p2pt_copy_batch_device_async(h, descs, count, 8,
                                                  (void *)(uintptr_t)(0x100000 + 8 * 24), NULL);
    cr_expect(strstr(p2pt_last_error(NULL), "overlaps") == NULL, "%d %s", (int)st,
              p2pt_last_error(NULL));
    p2pt_finalize(h);
    unsetenv("P2P_TRANSPORT");
}

Test(args, zero_bytes_with_a_live_handle_checks_nothing_else)
{
    /* bytes == 0 is a no-op whatever the pointers: a framework may pass an
     * empty slice with NULL or even overlapping addresses. */
    char buf[64] = {0};
    p2pt_handle *h = live_handle();
    cr_assert_eq(p2pt_copy_async(h, NULL, NULL, 0, NULL), P2PT_SUCCESS);
    cr_assert_eq(p2pt_copy_async(h, buf, buf, 0, NULL), P2PT_SUCCESS);
    cr_assert_eq(atomic_load(&h->stats.copies), 0);
    cr_assert_eq(atomic_load(&h->stats.rejected), 0);
    /* A refused copy is counted (it fails before any CUDA call). */
    cr_assert_eq(p2pt_copy_async(h, NULL, buf, 8, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p2pt_copy_async(h, buf, buf + 4, 8, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(atomic_load(&h->stats.rejected), 2);
    p2pt_finalize(h);
    /* ...but not with a NULL handle. */
    cr_assert_eq(p2pt_copy_async(NULL, NULL, NULL, 0, NULL), P2PT_INVALID_ARGUMENT);
}
