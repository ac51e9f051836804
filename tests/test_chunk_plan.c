/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Chunk planning, exhaustively: for every size 0..4096 and every pair of
 * offsets 0..31, with 48 KiB and 64-byte chunks (16-byte chunks to 1024
 * bytes, where they already make 64 chunks a copy), each byte is
 * covered exactly once (head, then chunks in order, then tail), the body is
 * 16-byte aligned on both sides, no chunk exceeds the limit, and copies whose
 * addresses differ modulo 16 are all head (they go to the copy engine).
 * A byte-by-byte coverage count confirms it for small sizes. Then large
 * random cases up to 8 GiB + odd, checked arithmetically.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "p2pt_internal.h"

/* Plain checks in the hot loop, a Criterion assertion only on failure:
 * millions of plans are checked. */
#define REQUIRE(cond, ...)                                                     \
    do {                                                                       \
        if (!(cond))                                                           \
            cr_assert_fail(__VA_ARGS__);                                       \
    } while (0)

/* Head [0, head), chunks back to back from head to head + body, tail to the
 * end: contiguity in order proves every byte is covered exactly once. */
static void check_plan(uintptr_t dst, uintptr_t src, size_t bytes, size_t chunk)
{
    struct p2pt_chunk_plan p;
    REQUIRE(p2pt__chunk_plan(dst, src, bytes, chunk, &p) == P2PT_SUCCESS, "plan failed");
    REQUIRE(p.coaligned == (dst % 16 == src % 16), "coaligned wrong for dst+%zu src+%zu",
            (size_t)(dst % 32), (size_t)(src % 32));
    REQUIRE(p.head + p.body + p.tail == bytes, "parts %zu+%zu+%zu != %zu", p.head, p.body,
            p.tail, bytes);
    if (!p.coaligned) {
        REQUIRE(p.head == bytes && p.chunks == 0, "non-co-aligned copy not all head");
        return;
    }
    REQUIRE(p.head < 16 || p.head == bytes, "head %zu", p.head);
    REQUIRE(p.tail < 16 && p.body % 16 == 0, "tail %zu body %zu", p.tail, p.body);
    REQUIRE(p.body == 0 || (dst + p.head) % 16 == 0, "body not aligned");
    REQUIRE(p.chunks == p.body / chunk + (p.body % chunk != 0), "chunk count %llu",
            (unsigned long long)p.chunks);
    size_t next = p.head;
    for (uint64_t c = 0; c < p.chunks; c++) {
        size_t off, len;
        p2pt__chunk_at(&p, c, &off, &len);
        REQUIRE(off == next, "%zu bytes: chunk %llu starts at %zu, expected %zu (gap or overlap)",
                bytes, (unsigned long long)c, off, next);
        REQUIRE(len > 0 && len <= chunk && len % 16 == 0, "chunk %llu has %zu bytes",
                (unsigned long long)c, len);
        REQUIRE((dst + off) % 16 == 0 && (src + off) % 16 == 0, "chunk %llu misaligned",
                (unsigned long long)c);
        next = off + len;
    }
    REQUIRE(next == p.head + p.body, "chunks end at %zu, body ends at %zu", next,
            p.head + p.body);
}

static void exhaustive(size_t chunk, size_t max_bytes)
{
    const uintptr_t base_d = 0x7f0000000000ull, base_s = 0x7f1000000000ull;
    for (size_t bytes = 0; bytes <= max_bytes; bytes++)
        for (uintptr_t od = 0; od < 32; od++)
            for (uintptr_t os = 0; os < 32; os++)
                check_plan(base_d + od, base_s + os, bytes, chunk);
}

Test(chunk_plan, every_size_to_4096_and_offset_pair_with_48k_chunks)
{
    exhaustive(48 * 1024, 4096);
}

Test(chunk_plan, every_size_to_4096_and_offset_pair_with_64_byte_chunks)
{
    exhaustive(64, 4096);
}

Test(chunk_plan, every_size_to_1024_and_offset_pair_with_16_byte_chunks)
{
    exhaustive(16, 1024);
}

/*
 * The same property counted byte by byte, independently of the contiguity
 * argument above: every byte of the copy is written by exactly one part
 * (head, a chunk, or tail) and nothing outside [0, bytes) is.
 */
static void count_coverage(size_t max_bytes, size_t chunk)
{
    enum { MARGIN = 64 }; /* bytes past the end that must stay unwritten */
    unsigned char *cover = malloc(max_bytes + MARGIN);
    cr_assert_not_null(cover);
    for (size_t bytes = 0; bytes <= max_bytes; bytes++) {
        for (uintptr_t od = 0; od < 32; od++) {
            for (uintptr_t os = 0; os < 32; os++) {
                uintptr_t d = 0x10000 + od, s = 0x90000 + os;
                struct p2pt_chunk_plan p;
                REQUIRE(p2pt__chunk_plan(d, s, bytes, chunk, &p) == P2PT_SUCCESS, "plan");
                REQUIRE(p.head <= bytes && p.body <= bytes - p.head &&
                            p.tail <= bytes - p.head - p.body,
                        "%zu bytes: parts %zu+%zu+%zu run past the end", bytes, p.head, p.body,
                        p.tail);
                memset(cover, 0, bytes + MARGIN);
                for (size_t i = 0; i < p.head; i++)
                    cover[i]++;
                for (uint64_t c = 0; c < p.chunks; c++) {
                    size_t off, len;
                    p2pt__chunk_at(&p, c, &off, &len);
                    REQUIRE(off <= bytes && len <= bytes - off,
                            "%zu bytes: chunk %llu [%zu, +%zu) runs past the end", bytes,
                            (unsigned long long)c, off, len);
                    for (size_t i = off; i < off + len; i++)
                        cover[i]++;
                }
                for (size_t i = p.head + p.body; i < p.head + p.body + p.tail; i++)
                    cover[i]++;
                for (size_t i = 0; i < bytes + MARGIN; i++) {
                    unsigned want = i < bytes ? 1u : 0u;
                    REQUIRE(cover[i] == want,
                            "%zu bytes, dst+%zu src+%zu, chunk %zu: byte %zu written %u times",
                            bytes, (size_t)od, (size_t)os, chunk, i, (unsigned)cover[i]);
                }
            }
        }
    }
    free(cover);
}

Test(chunk_plan, every_byte_is_written_exactly_once_counted_byte_by_byte)
{
    count_coverage(300, 16);
    count_coverage(300, 48);
    count_coverage(300, 48 * 1024);
}

Test(chunk_plan, unaligned_head_goes_to_plain_copy)
{
    struct p2pt_chunk_plan p;
    cr_assert_eq(p2pt__chunk_plan(0x1003, 0x2003, 100, 48 * 1024, &p), P2PT_SUCCESS);
    cr_assert_eq(p.head, 13);
    cr_assert_eq(p.body, 80);
    cr_assert_eq(p.tail, 7);
    cr_assert_eq(p.chunks, 1);
}

Test(chunk_plan, non_coaligned_copy_is_all_head)
{
    struct p2pt_chunk_plan p;
    cr_assert_eq(p2pt__chunk_plan(0x1001, 0x2002, 1 << 20, 48 * 1024, &p), P2PT_SUCCESS);
    cr_assert(!p.coaligned);
    cr_assert_eq(p.head, 1 << 20);
    cr_assert_eq(p.chunks, 0);
}

Test(chunk_plan, large_random_cases_add_up)
{
    /* Under valgrind (scripts/test.sh's P2PT_TEST_UNDER_VALGRIND=1) 200,000
     * cases take 225 s, a sixth of the CI: there the first 10,000, the
     * sanitizer and plain phases all of them. */
    const int cases = gt_under_valgrind() ? 10000 : 200000;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < cases; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t bytes = (size_t)(x % ((8ull << 30) + 1)) | (i & 1);
        uintptr_t d = 0x7f0000000000ull + (x >> 40) % 64, s = 0x7f4000000000ull + (x >> 50) % 64;
        size_t chunk = 16 * (1 + (size_t)((x >> 20) % 14528)); /* 16 .. 227 KiB */
        check_plan(d, s, bytes, chunk);
        if (bytes && (d % 16 == s % 16)) {
            struct p2pt_chunk_plan p;
            p2pt__chunk_plan(d, s, bytes, chunk, &p);
            if (p.chunks) {
                size_t off, len;
                p2pt__chunk_at(&p, p.chunks - 1, &off, &len);
                cr_assert_eq(off + len, p.head + p.body, "last chunk ends at the body's end");
                cr_assert(len <= chunk && len % 16 == 0);
            }
        }
    }
}

Test(chunk_plan, bad_chunk_sizes_are_status_4)
{
    struct p2pt_chunk_plan p;
    cr_assert_eq(p2pt__chunk_plan(0, 0, 100, 0, &p), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p2pt__chunk_plan(0, 0, 100, 1000, &p), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt__last_error_text(), "1000") != NULL);
}
