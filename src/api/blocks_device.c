/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Blocks moved by a mapping in GPU memory (p2pt.h's
 * p2pt_copy_blocks_device_async): a device batch whose descriptors the
 * engine writes into the workspace from the mapping and the layers, on the
 * stream, so the host never reads the mapping. It takes the operation
 * pipeline as p2pt_copy_batch_device_async does; its argument check
 * (args.c) places the descriptors and the count in the workspace.
 */
#include <stdlib.h>

#include "handles.h"
#include "operation.h"

size_t p2pt_blocks_workspace_bytes(size_t n_layers, uint32_t pairs)
{
    return p2pt__blocks_workspace_size(n_layers, pairs);
}

p2pt_status p2pt_copy_blocks_device_async(p2pt_handle *h, const p2pt_block_layer *layers,
                                          size_t n_layers, const int64_t *mapping,
                                          uint32_t pairs, void *workspace, void *stream)
{
    const char *fn = "p2pt_copy_blocks_device_async";
    p2pt_status st = p2pt__check_handle(h, fn);
    if (st != P2PT_SUCCESS)
        return st;
    struct p2pt_device_blocks k = {layers, 0, n_layers, mapping, pairs, false, NULL};
    struct p2pt_op op;
    p2pt__op_device_blocks(&op, fn, &k, workspace, stream);
    st = p2pt__op_run(h, &op, NULL);
    free(k.own); /* the layers as the check read them */
    return st;
}
