/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The blob an export hands out and an import reads: 256 bytes of fixed
 * little-endian fields, so that processes built by other compilers, or by a
 * later p2pt, read it the same way. The magic and the version stay where
 * they are in every version, so an older reader can say "newer" rather
 * than "corrupted"; a CRC-32 over the rest catches bytes changed on the
 * way. What the blob claims is checked before anything is mapped: one
 * export whole, made on this host, in this boot.
 *
 *   0  magic "P2SB"      4  version u16     6  kind u8      7  zero
 *   8  index u16        10  count u16      12  pid u32
 *  16  token[16]        32  boot id[16]    48  GPU UUID[16]
 *  64  host hash u64    72  server u64     80  span u64     88  offset u64
 *  96  bytes u64       104  piece offset  112  piece size   120  exporter VA
 * 128  payload[64]     192  host[32]      224  zero[28]     252  CRC-32 u32
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "share.h"

_Static_assert(P2PT_SHARE_BLOB_BYTES == 256, "the layout above is 256 bytes");

static const unsigned char magic[4] = {'P', '2', 'S', 'B'};
#define CRC_AT 252

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* CRC-32 (IEEE, reflected), bit by bit: 252 bytes a blob, a few per call. */
static uint32_t crc32(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

void p2pt__share_blob_seal(p2pt_share_blob *b)
{
    put32(b->bytes + CRC_AT, crc32(b->bytes, CRC_AT));
}

void p2pt__share_blob_write(const struct p2pt_share_desc *d, p2pt_share_blob *b)
{
    unsigned char *p = b->bytes;
    memset(p, 0, sizeof(b->bytes));
    memcpy(p, magic, 4);
    put16(p + 4, d->version);
    p[6] = d->kind;
    put16(p + 8, d->index);
    put16(p + 10, d->count);
    put32(p + 12, d->pid);
    memcpy(p + 16, d->token, 16);
    memcpy(p + 32, d->boot_id, 16);
    memcpy(p + 48, d->gpu_uuid, 16);
    put64(p + 64, d->host_hash);
    put64(p + 72, d->server);
    put64(p + 80, d->span);
    put64(p + 88, d->offset);
    put64(p + 96, d->bytes);
    put64(p + 104, d->piece_offset);
    put64(p + 112, d->piece_size);
    put64(p + 120, d->exporter_va);
    memcpy(p + 128, d->payload, P2PT_SHARE_PAYLOAD_BYTES);
    memcpy(p + 192, d->host, strnlen(d->host, P2PT_SHARE_HOST_CHARS - 1));
    p2pt__share_blob_seal(b);
}

p2pt_status p2pt__share_blob_read(const p2pt_share_blob *b, size_t i, struct p2pt_share_desc *d)
{
    /* The caller's bytes read once: the checksum covers what is parsed. */
    const p2pt_share_blob copy = *b;
    const unsigned char *p = copy.bytes;
    memset(d, 0, sizeof(*d));
    if (memcmp(p, magic, 4) != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_import: blob %zu is not a p2pt share blob (it starts "
                          "%02x %02x %02x %02x, a blob starts \"P2SB\"): pass the bytes "
                          "p2pt_share_export wrote, all %d of them, unchanged",
                          i, p[0], p[1], p[2], p[3], P2PT_SHARE_BLOB_BYTES);
    d->version = get16(p + 4);
    if (d->version > P2PT_SHARE_VERSION)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "p2pt_share_import: blob %zu is of version %u, newer than the "
                          "version %d this p2pt (%s) reads: import with a p2pt at least as new "
                          "as the exporter's",
                          i, d->version, P2PT_SHARE_VERSION, P2PT_VERSION_STRING);
    if (d->version == 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_import: blob %zu is of version 0, which no p2pt writes: "
                          "it is damaged",
                          i);
    uint32_t want = get32(p + CRC_AT), got = crc32(p, CRC_AT);
    if (want != got)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_import: blob %zu is corrupted: it says checksum 0x%08x, "
                          "its bytes give 0x%08x (bytes changed or cut on the way: carry all "
                          "%d bytes unchanged)",
                          i, want, got, P2PT_SHARE_BLOB_BYTES);
    d->kind = p[6];
    d->index = get16(p + 8);
    d->count = get16(p + 10);
    d->pid = get32(p + 12);
    memcpy(d->token, p + 16, 16);
    memcpy(d->boot_id, p + 32, 16);
    memcpy(d->gpu_uuid, p + 48, 16);
    d->host_hash = get64(p + 64);
    d->server = get64(p + 72);
    d->span = get64(p + 80);
    d->offset = get64(p + 88);
    d->bytes = get64(p + 96);
    d->piece_offset = get64(p + 104);
    d->piece_size = get64(p + 112);
    d->exporter_va = get64(p + 120);
    memcpy(d->payload, p + 128, P2PT_SHARE_PAYLOAD_BYTES);
    memcpy(d->host, p + 192, P2PT_SHARE_HOST_CHARS - 1);
    d->host[P2PT_SHARE_HOST_CHARS - 1] = '\0';
    if (d->kind < P2PT_SHARE_LEGACY || d->kind > P2PT_SHARE_POOL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_import: blob %zu names memory of kind %u; version %u "
                          "knows kinds 1 (legacy IPC), 2 (VMM) and 3 (pool)",
                          i, d->kind, d->version);
    if (d->count == 0 || d->count > P2PT_SHARE_MAX_PIECES || d->index >= d->count ||
        (d->kind != P2PT_SHARE_VMM && d->count != 1))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_import: blob %zu says it is blob %u of %u, which an "
                          "export of kind %u cannot have (1 to %d blobs, legacy and pool "
                          "exports 1)",
                          i, d->index, d->count, d->kind, P2PT_SHARE_MAX_PIECES);
    if (d->bytes == 0 || d->span == 0 || d->offset > d->span || d->bytes > d->span - d->offset)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_import: blob %zu: the range [+%llu, +%llu) runs past "
                          "its allocation of %llu bytes (or is empty)",
                          i, (unsigned long long)d->offset,
                          (unsigned long long)(d->offset + d->bytes),
                          (unsigned long long)d->span);
    if (d->piece_size == 0 || d->piece_offset > d->span ||
        d->piece_size > d->span - d->piece_offset ||
        (d->kind != P2PT_SHARE_VMM && (d->piece_offset != 0 || d->piece_size != d->span)))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_import: blob %zu: its piece [+%llu, +%llu) does not lie "
                          "in the export's %llu bytes",
                          i, (unsigned long long)d->piece_offset,
                          (unsigned long long)(d->piece_offset + d->piece_size),
                          (unsigned long long)d->span);
    return P2PT_SUCCESS;
}

static void token_text(const uint8_t *t, char *out, size_t len)
{
    size_t used = 0;
    for (int k = 0; k < P2PT_SHARE_TOKEN_BYTES && used + 3 <= len; k++)
        used += (size_t)snprintf(out + used, len - used, "%02x", t[k]);
}

/* The fields every blob of one export shares: the first that differs. */
static const char *differs(const struct p2pt_share_desc *a, const struct p2pt_share_desc *b)
{
    if (a->kind != b->kind)
        return "kind";
    if (a->count != b->count)
        return "blob count";
    if (a->pid != b->pid)
        return "exporting process";
    if (memcmp(a->boot_id, b->boot_id, 16) != 0)
        return "boot id";
    if (memcmp(a->gpu_uuid, b->gpu_uuid, 16) != 0)
        return "GPU";
    if (a->host_hash != b->host_hash)
        return "host";
    if (a->server != b->server)
        return "descriptor server";
    if (a->span != b->span || a->offset != b->offset || a->bytes != b->bytes ||
        a->exporter_va != b->exporter_va)
        return "range";
    return NULL;
}

p2pt_status p2pt__share_blobs_check(const p2pt_share_blob *blobs, size_t n,
                                    struct p2pt_share_desc *out)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_share_desc d0, d;
    size_t *at = NULL;

    if (blobs == NULL || n == 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_import: blobs is %s and n_blobs %zu: expected the blobs "
                          "of one export, as many as p2pt_share_export wrote",
                          blobs == NULL ? "NULL" : "given", n);
    P2PT_TRY(p2pt__share_blob_read(&blobs[0], 0, &d0));
    /* More blobs than the export has repeat an index or belong elsewhere:
     * the loop says which. */
    at = malloc(d0.count * sizeof(*at));
    if (at == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
    for (size_t k = 0; k < d0.count; k++)
        at[k] = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            P2PT_TRY(p2pt__share_blob_read(&blobs[i], i, &d));
        else
            d = d0;
        if (memcmp(d.token, d0.token, P2PT_SHARE_TOKEN_BYTES) != 0) {
            char t0[40], ti[40];
            token_text(d0.token, t0, sizeof(t0));
            token_text(d.token, ti, sizeof(ti));
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "p2pt_share_import: blobs of two exports: blob %zu belongs to "
                            "export %s of process %u, blob 0 to export %s of process %u; pass "
                            "the blobs of one p2pt_share_export call",
                            i, ti, d.pid, t0, d0.pid);
            goto out;
        }
        const char *field = differs(&d0, &d);
        if (field != NULL) {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "p2pt_share_import: blob %zu disagrees with blob 0 on the %s "
                            "though both name one export: they were altered",
                            i, field);
            goto out;
        }
        if (at[d.index] != SIZE_MAX) {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "p2pt_share_import: blob %zu repeats index %u of the export (blob "
                            "%zu has it too); pass each of its %u blobs once",
                            i, d.index, at[d.index], d0.count);
            goto out;
        }
        at[d.index] = i;
        /* `out` holds n: an index past it means blobs are missing, which
         * the count below reports. */
        if (d.index < n)
            out[d.index] = d;
    }
    if (n < d0.count) {
        size_t missing = 0;
        while (at[missing] != SIZE_MAX)
            missing++;
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_share_import: the export has %u blobs and %zu were given: index "
                        "%zu is missing; pass all of them",
                        d0.count, n, missing);
        goto out;
    }
    /* VMM pieces lie side by side from 0 to the span, in index order. */
    uint64_t end = 0;
    for (size_t k = 0; k < n; k++) {
        if (out[k].piece_offset != end) {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "p2pt_share_import: piece %zu of the export starts at +%llu, but "
                            "the pieces before it end at +%llu: its blobs do not tile the "
                            "range they claim",
                            k, (unsigned long long)out[k].piece_offset,
                            (unsigned long long)end);
            goto out;
        }
        end += out[k].piece_size;
    }
    if (end != d0.span) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_share_import: the export's pieces cover %llu bytes of the %llu "
                        "its blobs claim",
                        (unsigned long long)end, (unsigned long long)d0.span);
        goto out;
    }
    const struct p2pt_share_host *here = p2pt__share_host();
    if (d0.host_hash != here->host_hash) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_share_import: the blobs were made on host \"%s\" and this is host "
                        "\"%s\": memory is shared between the processes of one host only",
                        d0.host, here->host);
        goto out;
    }
    if (memcmp(d0.boot_id, here->boot_id, 16) != 0) {
        char then[48], now[48];
        p2pt__share_uuid_text(d0.boot_id, "", then, sizeof(then));
        p2pt__share_uuid_text(here->boot_id, "", now, sizeof(now));
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_share_import: the blobs were made in another boot of this host "
                        "(boot id %s; now %s): the memory they name is gone",
                        then, now);
        goto out;
    }
out:
    free(at);
    return st;
}

/* ------------------------------------------------------------- this host */

static struct p2pt_share_host here;
static pthread_once_t here_once = PTHREAD_ONCE_INIT;

static int hex(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void read_here(void)
{
    /* The boot id changes at every boot: blobs of an earlier boot name
     * memory that no longer exists. Unreadable, it reads as zeros on both
     * sides. */
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        char text[64] = "";
        if (fgets(text, sizeof(text), f) != NULL) {
            int nib = 0;
            for (const char *c = text; *c != '\0' && nib < 32; c++) {
                int v = hex(*c);
                if (v < 0)
                    continue;
                here.boot_id[nib / 2] = (uint8_t)(here.boot_id[nib / 2] | (v << (nib % 2 ? 0 : 4)));
                nib++;
            }
        }
        fclose(f);
    }
    char name[HOST_NAME_MAX + 1] = "";
    if (gethostname(name, sizeof(name)) != 0)
        name[0] = '\0';
    name[HOST_NAME_MAX] = '\0';
    /* Hashed whole; the blob keeps its start for messages. */
    snprintf(here.host, sizeof(here.host), "%s", name);
    here.host_hash = p2pt__fnv1a(P2PT_FNV1A_START, name, strlen(name));
}

const struct p2pt_share_host *p2pt__share_host(void)
{
    pthread_once(&here_once, read_here);
    return &here;
}

p2pt_status p2pt__share_random(void *out, size_t n)
{
    unsigned char *p = out;
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(p + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got == n)
        return P2PT_SUCCESS;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (fd >= 0)
        close(fd);
    if (got == n)
        return P2PT_SUCCESS;
    return p2pt__fail(P2PT_SYSTEM_ERROR,
                      "no random bytes for an export's token: getrandom and /dev/urandom "
                      "both failed (%s)",
                      strerror(errno));
}

void p2pt__share_uuid_text(const uint8_t u[16], const char *prefix, char *out, size_t len)
{
    snprintf(out, len,
             "%s%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix,
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
             u[13], u[14], u[15]);
}
