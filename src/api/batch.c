/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch entry points (p2pt.h): host descriptors and device
 * descriptors. Each checks the handle and hands its batch to the operation
 * pipeline (operation.c), the same steps as a single copy.
 */
#include "handles.h"
#include "operation.h"

p2pt_status p2pt_copy_batch_async(p2pt_handle *h, const p2pt_copy_desc *descs, size_t count,
                                  void *stream)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_copy_batch_async");
    if (st != P2PT_SUCCESS)
        return st;
    if (count == 0)
        return P2PT_SUCCESS;
    struct p2pt_op op;
    p2pt__op_batch(&op, "p2pt_copy_batch_async", descs, count, stream);
    return p2pt__op_run(h, &op, NULL);
}

size_t p2pt_batch_workspace_bytes(uint32_t max_count)
{
    return p2pt__batch_workspace_size(max_count);
}

p2pt_status p2pt_copy_batch_device_async(p2pt_handle *h, const p2pt_copy_desc *descs,
                                         const uint32_t *count, uint32_t max_count,
                                         void *workspace, void *stream)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_copy_batch_device_async");
    if (st != P2PT_SUCCESS)
        return st;
    struct p2pt_op op;
    p2pt__op_device_batch(&op, "p2pt_copy_batch_device_async", descs, count, max_count,
                          workspace, stream);
    return p2pt__op_run(h, &op, NULL);
}
