/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The entry points of memory shared between processes (p2pt.h's
 * p2pt_share_*): each checks its handle and hands the call to the share
 * module.
 */
#include "handles.h"
#include "share.h"

p2pt_status p2pt_share_export(p2pt_handle *h, const void *base, size_t bytes,
                              p2pt_share_blob *blobs, size_t *n_blobs)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_share_export");
    if (st != P2PT_SUCCESS)
        return st;
    return p2pt__share_export(h, base, bytes, blobs, n_blobs);
}

p2pt_status p2pt_share_unexport(p2pt_handle *h, const void *base)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_share_unexport");
    if (st != P2PT_SUCCESS)
        return st;
    return p2pt__share_unexport(h, base);
}

p2pt_status p2pt_share_import(p2pt_handle *h, int device, const p2pt_share_blob *blobs,
                              size_t n_blobs, void **ptr, p2pt_share_import_t **imp)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_share_import");
    if (st != P2PT_SUCCESS)
        return st;
    return p2pt__share_import(h, device, blobs, n_blobs, ptr, imp);
}

p2pt_status p2pt_share_close(p2pt_handle *h, p2pt_share_import_t *imp)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_share_close");
    if (st != P2PT_SUCCESS)
        return st;
    return p2pt__share_close(h, imp);
}
