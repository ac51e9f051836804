/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The blobs of memory shared between processes, and every way one can be
 * bad. A blob written and read back gives every field again; the checksum
 * covers every byte after the version. Each bad blob, or set of blobs,
 * gets its status and a message that names what is wrong, from the codec
 * and through a real p2pt_share_import over the fake driver, which then
 * maps nothing: no driver call that maps, no window, no import counted.
 * Bad: not a blob (magic), a corrupted checksum, a newer version (status
 * 6), version 0, an unknown kind, another boot, another host, an unknown
 * GPU, blobs of two exports, an index missing (a truncated count) or
 * repeated, a range past its allocation, pieces that do not tile it.
 */
#include "share_test.h"

/* A valid description of blob `index` of a 3-piece VMM export made here. */
static struct p2pt_share_desc sample(uint16_t index)
{
    const struct p2pt_share_host *here = p2pt__share_host();
    struct p2pt_share_desc d;
    memset(&d, 0, sizeof(d));
    d.version = P2PT_SHARE_VERSION;
    d.kind = P2PT_SHARE_VMM;
    d.index = index;
    d.count = 3;
    d.pid = 4242;
    memset(d.token, 0x5a, sizeof(d.token));
    memcpy(d.boot_id, here->boot_id, 16);
    memcpy(d.gpu_uuid, "p2pt-fake-gpu-\0" "0", 16);
    d.host_hash = here->host_hash;
    memcpy(d.host, here->host, sizeof(d.host));
    d.server = 0x0123456789abcdefull;
    d.span = 3u << 21;
    d.offset = 1u << 20;
    d.bytes = 2u << 20;
    d.piece_offset = (uint64_t)index << 21;
    d.piece_size = 1u << 21;
    d.exporter_va = 0x7f0000000000ull;
    for (int i = 0; i < P2PT_SHARE_PAYLOAD_BYTES; i++)
        d.payload[i] = (uint8_t)(i * 7);
    return d;
}

static void write_all(p2pt_share_blob *b, int n)
{
    for (int i = 0; i < n; i++) {
        struct p2pt_share_desc d = sample((uint16_t)i);
        p2pt__share_blob_write(&d, &b[i]);
    }
}

Test(share_blob, a_blob_written_reads_back_every_field)
{
    p2pt_share_blob b;
    struct p2pt_share_desc d = sample(1), got;
    p2pt__share_blob_write(&d, &b);
    cr_assert_eq(memcmp(b.bytes, "P2SB", 4), 0);
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_SUCCESS, "%s", p2pt__last_error_text());
    cr_expect_eq(got.version, d.version);
    cr_expect_eq(got.kind, d.kind);
    cr_expect_eq(got.index, 1);
    cr_expect_eq(got.count, 3);
    cr_expect_eq(got.pid, 4242);
    cr_expect_eq(memcmp(got.token, d.token, 16), 0);
    cr_expect_eq(memcmp(got.boot_id, d.boot_id, 16), 0);
    cr_expect_eq(memcmp(got.gpu_uuid, d.gpu_uuid, 16), 0);
    cr_expect_eq(got.host_hash, d.host_hash);
    cr_expect_str_eq(got.host, d.host);
    cr_expect_eq(got.server, d.server);
    cr_expect_eq(got.span, d.span);
    cr_expect_eq(got.offset, d.offset);
    cr_expect_eq(got.bytes, d.bytes);
    cr_expect_eq(got.piece_offset, d.piece_offset);
    cr_expect_eq(got.piece_size, d.piece_size);
    cr_expect_eq(got.exporter_va, d.exporter_va);
    cr_expect_eq(memcmp(got.payload, d.payload, sizeof(d.payload)), 0);
}

Test(share_blob, the_checksum_covers_every_byte_after_the_version)
{
    p2pt_share_blob good, b;
    struct p2pt_share_desc d = sample(0), got;
    p2pt__share_blob_write(&d, &good);
    for (int i = 6; i < P2PT_SHARE_BLOB_BYTES; i++) {
        b = good;
        b.bytes[i] ^= 0x10;
        cr_assert_eq(p2pt__share_blob_read(&b, 2, &got), P2PT_INVALID_ARGUMENT,
                     "byte %d changed, yet the blob reads", i);
        st_expect_text("blob 2 is corrupted");
    }
}

Test(share_blob, not_a_blob_is_status_4_naming_the_magic)
{
    p2pt_share_blob b;
    struct p2pt_share_desc d = sample(0), got;
    p2pt__share_blob_write(&d, &b);
    b.bytes[0] = 'X';
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_INVALID_ARGUMENT);
    st_expect_text("blob 0 is not a p2pt share blob");
    st_expect_text("\"P2SB\"");
}

Test(share_blob, a_newer_version_is_status_6_naming_both_versions)
{
    p2pt_share_blob b;
    struct p2pt_share_desc d = sample(0), got;
    p2pt__share_blob_write(&d, &b);
    b.bytes[4] = 2;
    p2pt__share_blob_seal(&b);
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_NOT_SUPPORTED);
    st_expect_text("version 2, newer than the version 1");
    /* Even a damaged newer blob says "newer": the version is read first. */
    b.bytes[100] ^= 1;
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_NOT_SUPPORTED);
    b.bytes[4] = 0;
    p2pt__share_blob_seal(&b);
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_INVALID_ARGUMENT);
    st_expect_text("version 0");
}

Test(share_blob, fields_that_contradict_each_other_are_status_4)
{
    struct p2pt_share_desc d, got;
    p2pt_share_blob b;
    d = sample(0);
    d.kind = 9;
    p2pt__share_blob_write(&d, &b);
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_INVALID_ARGUMENT);
    st_expect_text("kind 9");
    d = sample(0);
    d.index = 3; /* of 3 */
    p2pt__share_blob_write(&d, &b);
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_INVALID_ARGUMENT);
    st_expect_text("blob 3 of 3");
    d = sample(0);
    d.kind = P2PT_SHARE_LEGACY; /* a legacy export has one blob */
    p2pt__share_blob_write(&d, &b);
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_INVALID_ARGUMENT);
    d = sample(0);
    d.offset = d.span - 10; /* the range runs past the allocation */
    p2pt__share_blob_write(&d, &b);
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_INVALID_ARGUMENT);
    st_expect_text("runs past its allocation");
    d = sample(2);
    d.piece_size = 2u << 21; /* the last piece runs past the span */
    p2pt__share_blob_write(&d, &b);
    cr_assert_eq(p2pt__share_blob_read(&b, 0, &got), P2PT_INVALID_ARGUMENT);
    st_expect_text("does not lie in the export");
}

Test(share_blob, a_whole_export_checks_and_comes_back_in_index_order)
{
    p2pt_share_blob b[3], shuffled[3];
    struct p2pt_share_desc out[3];
    write_all(b, 3);
    shuffled[0] = b[2];
    shuffled[1] = b[0];
    shuffled[2] = b[1];
    cr_assert_eq(p2pt__share_blobs_check(shuffled, 3, out), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    for (int i = 0; i < 3; i++)
        cr_expect_eq(out[i].index, i);
}

Test(share_blob, a_truncated_set_is_status_4_naming_the_missing_index)
{
    p2pt_share_blob b[3];
    struct p2pt_share_desc out[3];
    write_all(b, 3);
    cr_assert_eq(p2pt__share_blobs_check(b, 2, out), P2PT_INVALID_ARGUMENT);
    st_expect_text("the export has 3 blobs and 2 were given: index 2 is missing");
}

/* The importer sizes its descriptions by the blobs it was given, so a blob
 * whose index lies past them (the last of three passed alone) must not be
 * written there: `out` holds exactly n here, on the heap, where the
 * sanitizers see a write past it. */
Test(share_blob, a_later_blob_alone_is_status_4_and_writes_only_its_n_descriptions)
{
    p2pt_share_blob b[3];
    write_all(b, 3);
    for (int last = 1; last <= 2; last++) {
        struct p2pt_share_desc *out = calloc(1, sizeof(*out));
        cr_assert_not_null(out);
        cr_assert_eq(p2pt__share_blobs_check(&b[last], 1, out), P2PT_INVALID_ARGUMENT);
        st_expect_text("the export has 3 blobs and 1 were given: index 0 is missing");
        free(out);
    }
    struct p2pt_share_desc *out = calloc(2, sizeof(*out));
    cr_assert_not_null(out);
    cr_assert_eq(p2pt__share_blobs_check(&b[1], 2, out), P2PT_INVALID_ARGUMENT);
    st_expect_text("the export has 3 blobs and 2 were given: index 0 is missing");
    free(out);
}

Test(share_blob, a_repeated_index_is_status_4_naming_both_blobs)
{
    p2pt_share_blob b[3];
    struct p2pt_share_desc out[3];
    write_all(b, 3);
    b[2] = b[0];
    cr_assert_eq(p2pt__share_blobs_check(b, 3, out), P2PT_INVALID_ARGUMENT);
    st_expect_text("blob 2 repeats index 0 of the export (blob 0 has it too)");
}

Test(share_blob, blobs_of_two_exports_are_status_4)
{
    p2pt_share_blob b[3];
    struct p2pt_share_desc out[3], d = sample(1);
    write_all(b, 3);
    d.token[0] ^= 1;
    p2pt__share_blob_write(&d, &b[1]);
    cr_assert_eq(p2pt__share_blobs_check(b, 3, out), P2PT_INVALID_ARGUMENT);
    st_expect_text("blobs of two exports: blob 1 belongs to export");
    /* The same token but another range: altered, not one export. */
    write_all(b, 3);
    d = sample(1);
    d.bytes -= 1;
    p2pt__share_blob_write(&d, &b[1]);
    cr_assert_eq(p2pt__share_blobs_check(b, 3, out), P2PT_INVALID_ARGUMENT);
    st_expect_text("blob 1 disagrees with blob 0 on the range");
}

Test(share_blob, pieces_that_do_not_tile_the_range_are_status_4)
{
    p2pt_share_blob b[3];
    struct p2pt_share_desc out[3], d = sample(1);
    write_all(b, 3);
    d.piece_offset += 4096;
    d.piece_size -= 4096;
    p2pt__share_blob_write(&d, &b[1]);
    cr_assert_eq(p2pt__share_blobs_check(b, 3, out), P2PT_INVALID_ARGUMENT);
    st_expect_text("do not tile the range they claim");
}

Test(share_blob, another_host_and_another_boot_are_status_4)
{
    p2pt_share_blob b[3];
    struct p2pt_share_desc out[3];
    for (int i = 0; i < 3; i++) {
        struct p2pt_share_desc d = sample((uint16_t)i);
        d.host_hash ^= 1;
        snprintf(d.host, sizeof(d.host), "elsewhere");
        p2pt__share_blob_write(&d, &b[i]);
    }
    cr_assert_eq(p2pt__share_blobs_check(b, 3, out), P2PT_INVALID_ARGUMENT);
    st_expect_text("made on host \"elsewhere\"");
    for (int i = 0; i < 3; i++) {
        struct p2pt_share_desc d = sample((uint16_t)i);
        d.boot_id[15] ^= 1;
        p2pt__share_blob_write(&d, &b[i]);
    }
    cr_assert_eq(p2pt__share_blobs_check(b, 3, out), P2PT_INVALID_ARGUMENT);
    st_expect_text("made in another boot of this host");
}

/* ---------------------------------------------- through a real import */

/* A 3-allocation VMM export (over the fake driver), its blobs, a handle. */
struct real {
    p2pt_handle *h;
    struct st_vmm v;
    p2pt_share_blob b[3];
    size_t n;
};

static struct real real_export(void)
{
    struct real r;
    gt_use_fake_driver();
    r.h = gt_handle("ce");
    r.v = st_vmm_make(0, 3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    r.n = st_export(r.h, (void *)(uintptr_t)(r.v.va + 4096), r.v.size - 8192, r.b, 3);
    cr_assert_eq(r.n, 3);
    return r;
}

static const char *const mapping_entries[] = {
    "cuIpcOpenMemHandle", "cuMemImportFromShareableHandle", "cuMemAddressReserve", "cuMemMap",
    "cuMemSetAccess", "cuMemPoolImportFromShareableHandle", "cuMemPoolImportPointer"};

/* Import `b` for device 0: refused with `status` and `needle`, and nothing
 * mapped, registered or counted. */
static void expect_refused(struct real *r, const p2pt_share_blob *b, size_t n, p2pt_status status,
                           const char *needle)
{
    unsigned long before[P2PT_ARRAY_LEN(mapping_entries)];
    for (size_t i = 0; i < P2PT_ARRAY_LEN(mapping_entries); i++)
        before[i] = gt_fake_calls(mapping_entries[i]);
    int windows = st_windows(r->h, 0);
    void *ptr = (void *)1;
    p2pt_share_import_t *imp = (p2pt_share_import_t *)1;
    p2pt_status st = p2pt_share_import(r->h, 0, b, n, &ptr, &imp);
    cr_assert_eq(st, status, "import -> %d: %s", (int)st, p2pt_last_error(NULL));
    st_expect_text(needle);
    cr_expect_null(ptr);
    cr_expect_null(imp);
    for (size_t i = 0; i < P2PT_ARRAY_LEN(mapping_entries); i++)
        cr_expect_eq(gt_fake_calls(mapping_entries[i]), before[i], "%s was called",
                     mapping_entries[i]);
    cr_expect_eq(st_windows(r->h, 0), windows, "a window was registered");
    p2pt_properties p = gt_props(r->h);
    cr_expect_eq(p.share_imports_open, 0);
    cr_expect_eq(p.share_mappings, 0);
}

/* Decode blob i of `b`, change it with `edit`, write it back sealed. */
#define EDIT(b, i, stmt)                                                       \
    do {                                                                       \
        struct p2pt_share_desc d_;                                             \
        cr_assert_eq(p2pt__share_blob_read(&(b)[i], i, &d_), P2PT_SUCCESS);    \
        {                                                                      \
            struct p2pt_share_desc *d = &d_;                                   \
            stmt;                                                              \
        }                                                                      \
        p2pt__share_blob_write(&d_, &(b)[i]);                                  \
    } while (0)

Test(share_blob, every_bad_blob_is_refused_by_a_real_import_that_maps_nothing)
{
    struct real r = real_export();
    p2pt_share_blob b[3];

    memcpy(b, r.b, sizeof(b));
    b[1].bytes[0] = 0;
    expect_refused(&r, b, 3, P2PT_INVALID_ARGUMENT, "blob 1 is not a p2pt share blob");

    memcpy(b, r.b, sizeof(b));
    b[2].bytes[77] ^= 0xff;
    expect_refused(&r, b, 3, P2PT_INVALID_ARGUMENT, "blob 2 is corrupted");

    memcpy(b, r.b, sizeof(b));
    b[0].bytes[4] = 7;
    p2pt__share_blob_seal(&b[0]);
    expect_refused(&r, b, 3, P2PT_NOT_SUPPORTED, "version 7, newer");

    expect_refused(&r, r.b, 2, P2PT_INVALID_ARGUMENT, "index 2 is missing");
    expect_refused(&r, &r.b[2], 1, P2PT_INVALID_ARGUMENT, "index 0 is missing");

    memcpy(b, r.b, sizeof(b));
    b[2] = b[1];
    expect_refused(&r, b, 3, P2PT_INVALID_ARGUMENT, "repeats index 1");

    memcpy(b, r.b, sizeof(b));
    EDIT(b, 1, d->token[3] ^= 1);
    expect_refused(&r, b, 3, P2PT_INVALID_ARGUMENT, "blobs of two exports");

    memcpy(b, r.b, sizeof(b));
    for (int i = 0; i < 3; i++)
        EDIT(b, i, d->boot_id[0] ^= 1);
    expect_refused(&r, b, 3, P2PT_INVALID_ARGUMENT, "another boot");

    memcpy(b, r.b, sizeof(b));
    for (int i = 0; i < 3; i++)
        EDIT(b, i, (d->host_hash++, snprintf(d->host, sizeof(d->host), "node-b")));
    expect_refused(&r, b, 3, P2PT_INVALID_ARGUMENT, "made on host \"node-b\"");

    memcpy(b, r.b, sizeof(b));
    for (int i = 0; i < 3; i++)
        EDIT(b, i, memcpy(d->gpu_uuid, "GPU-not-on-this!", 16));
    expect_refused(&r, b, 3, P2PT_INVALID_ARGUMENT, "which this host does not have");

    memcpy(b, r.b, sizeof(b));
    for (int i = 0; i < 3; i++)
        EDIT(b, i, d->bytes = d->span - d->offset + 1);
    expect_refused(&r, b, 3, P2PT_INVALID_ARGUMENT, "runs past its allocation");

    memcpy(b, r.b, sizeof(b));
    EDIT(b, 1, (d->piece_offset += 4096, d->piece_size -= 4096));
    expect_refused(&r, b, 3, P2PT_INVALID_ARGUMENT, "do not tile");

    expect_refused(&r, NULL, 3, P2PT_INVALID_ARGUMENT, "blobs is NULL");
    expect_refused(&r, r.b, 0, P2PT_INVALID_ARGUMENT, "n_blobs 0");

    /* And the untouched blobs import (this very process's VMM memory is
     * mapped anew, through its own descriptor server). */
    void *ptr = NULL;
    p2pt_share_import_t *imp = NULL;
    GT_OK(p2pt_share_import(r.h, 0, r.b, 3, &ptr, &imp));
    GT_OK(p2pt_share_close(r.h, imp));
    p2pt_finalize(r.h);
    st_vmm_free(&r.v);
}
