/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness: the blobs another process hands p2pt_share_import.
 * Two kinds of input, by the first byte: raw bytes cut into 256-byte blobs
 * (each maybe given a blob's magic and version, this host and boot, and its
 * checksum sealed again, so that mutations reach the checks past those);
 * or a whole export built here (1 to 8 pieces of any kind), its blobs then
 * rotated, one dropped or repeated, and bytes flipped where the input says,
 * resealed or not, so that mutations start from what an exporter writes.
 * Whatever the bytes,
 * the check either refuses them with status 4 or 6 and a message, or
 * accepts one whole export: n blobs decoded into out[0..n) (exactly n
 * entries, on the heap, so a write past them is caught) in index order,
 * agreeing on everything an export shares, pieces that tile its span and a
 * range inside it, made on this host in this boot.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

enum { RESEAL = 1, HERE = 2, HEADER = 4, BUILT = 8 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void accepted(const struct p2pt_share_desc *out, size_t n)
{
    const struct p2pt_share_desc *d0 = &out[0];
    const struct p2pt_share_host *here = p2pt__share_host();
    if (d0->count != n || d0->host_hash != here->host_hash ||
        memcmp(d0->boot_id, here->boot_id, 16) != 0 || d0->bytes == 0 ||
        d0->offset > d0->span || d0->bytes > d0->span - d0->offset)
        abort();
    uint64_t end = 0;
    for (size_t k = 0; k < n; k++) {
        const struct p2pt_share_desc *d = &out[k];
        if (d->index != k || d->kind != d0->kind || d->count != d0->count ||
            d->span != d0->span || d->offset != d0->offset || d->bytes != d0->bytes ||
            memcmp(d->token, d0->token, sizeof(d->token)) != 0 || d->piece_offset != end ||
            d->piece_size == 0 || d->version == 0 || d->version > P2PT_SHARE_VERSION)
            abort();
        end += d->piece_size;
    }
    if (end != d0->span || (d0->kind != P2PT_SHARE_VMM && n != 1))
        abort();
}

static void check(const p2pt_share_blob *blobs, size_t n)
{
    struct p2pt_share_desc *out = malloc(n * sizeof(*out));
    if (out == NULL)
        return;
    p2pt_status st = p2pt__share_blobs_check(blobs, n, out);
    if (st == P2PT_SUCCESS)
        accepted(out, n);
    else if ((st != P2PT_INVALID_ARGUMENT && st != P2PT_NOT_SUPPORTED) ||
             p2pt__last_error_text()[0] == '\0')
        abort();
    free(out);
}

/* An export of in[0] % 8 + 1 pieces (one unless VMM) of kind in[1] % 3 + 1,
 * piece k of in[2 + k] % 4 + 1 granules; in[10] rotates the blobs, drops
 * one or repeats one; then (position, position, xor) triples flip bytes. */
static void built(const uint8_t *in, size_t size, unsigned how)
{
    enum { MOST = 8, HEAD = 11 };
    if (size < HEAD)
        return;
    const struct p2pt_share_host *here = p2pt__share_host();
    const uint8_t kind = (uint8_t)(P2PT_SHARE_LEGACY + in[1] % 3);
    const uint16_t count = kind == P2PT_SHARE_VMM ? (uint16_t)(in[0] % MOST + 1) : 1;
    uint64_t span = 0, at[MOST];
    for (int k = 0; k < count; k++) {
        at[k] = span;
        span += (uint64_t)(in[2 + k] % 4 + 1) << 21;
    }
    p2pt_share_blob b[MOST + 1];
    for (uint16_t k = 0; k < count; k++) {
        struct p2pt_share_desc d;
        memset(&d, 0, sizeof(d));
        d.version = P2PT_SHARE_VERSION;
        d.kind = kind;
        d.index = k;
        d.count = count;
        d.pid = 4242;
        memset(d.token, 0x5a, sizeof(d.token));
        memcpy(d.boot_id, here->boot_id, 16);
        d.host_hash = here->host_hash;
        memcpy(d.host, here->host, sizeof(d.host));
        d.span = span;
        d.offset = span / 4;
        d.bytes = span / 2;
        d.piece_offset = at[k];
        d.piece_size = (k + 1 < count ? at[k + 1] : span) - at[k];
        d.exporter_va = 0x7f0000000000ull;
        p2pt__share_blob_write(&d, &b[k]);
    }
    size_t n = count;
    const unsigned r = in[10];
    p2pt_share_blob rot[MOST + 1];
    for (size_t k = 0; k < n; k++)
        rot[k] = b[(k + r % n) % n];
    if ((r >> 4) % 4 == 1 && n > 1)
        n--; /* the last of the rotated set dropped */
    else if ((r >> 4) % 4 == 2) {
        rot[n] = rot[(r >> 6) % n]; /* one passed twice */
        n++;
    }
    for (size_t i = HEAD; i + 3 <= size; i += 3) {
        size_t pos = ((size_t)in[i] | (size_t)in[i + 1] << 8) % (n * P2PT_SHARE_BLOB_BYTES);
        rot[pos / P2PT_SHARE_BLOB_BYTES].bytes[pos % P2PT_SHARE_BLOB_BYTES] ^= in[i + 2];
    }
    if (how & RESEAL)
        for (size_t k = 0; k < n; k++)
            p2pt__share_blob_seal(&rot[k]);
    check(rot, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 1 && (data[0] & BUILT)) {
        built(data + 1, size - 1, data[0]);
        return 0;
    }
    if (size < 1 + P2PT_SHARE_BLOB_BYTES)
        return 0;
    const unsigned how = data[0];
    size_t n = (size - 1) / P2PT_SHARE_BLOB_BYTES;
    if (n > P2PT_SHARE_MAX_PIECES)
        n = P2PT_SHARE_MAX_PIECES;
    p2pt_share_blob *blobs = malloc(n * sizeof(*blobs));
    if (blobs == NULL)
        return 0;
    const struct p2pt_share_host *here = p2pt__share_host();
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = blobs[i].bytes;
        memcpy(p, data + 1 + i * P2PT_SHARE_BLOB_BYTES, P2PT_SHARE_BLOB_BYTES);
        if (how & HEADER) {
            memcpy(p, "P2SB", 4);
            put_u16(p + 4, P2PT_SHARE_VERSION);
        }
        if (how & HERE) {
            memcpy(p + 32, here->boot_id, 16);
            put_u64(p + 64, here->host_hash);
        }
        if (how & RESEAL)
            p2pt__share_blob_seal(&blobs[i]);
    }
    check(blobs, n);
    free(blobs);
    return 0;
}
