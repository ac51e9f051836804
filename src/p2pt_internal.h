/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every internal module header, for the tests and the benchmark (SQLite's
 * sqliteInt.h pattern). Library sources include only the headers of the
 * modules they use; frameworks never see any of them.
 *
 * Modules from the top; each calls and includes only those below it
 * (docs/LAYOUT.md):
 *
 *   api/       the entry points (no header of its own)
 *   core/      operation.h (the pipeline, one row of steps per kind),
 *              handles.h (the registry of live handles)
 *   share/     share.h (memory shared between processes: blobs, the
 *              descriptor server, exports, imports, the marks a close
 *              waits for)
 *   route/     router.h (routing, the fallback, the registry of policies),
 *              policy.h (what a policy is), auto.h and auto_table.h (auto)
 *   engines/   registry.h (the engines, in order), launch.h (kernel
 *              launches), tma.h and tma_settings.h (the TMA engine's
 *              settings)
 *   transfer/  what core and the engines share: request.h (one request,
 *              resolved), batch.h, transport.h (what an engine is), handle.h,
 *              windows.h, args.h, batch_scan.h (the pass over a host batch),
 *              alloc_memo.h, validate.h
 *   jit/       cubin_cache.h (CUDA-free), nvrtc_loader.h, jit.h
 *   cuda/      driver.h: the driver's entry points, contexts
 *   plans/     chunk_plan.h, batch_plan.h, coalesce.h: how copies and
 *              batches are cut up (CUDA-free)
 *   util/      common.h (status text, load-once, logger), config.h and
 *              settings.h (the configuration, declared settings; CUDA-free)
 */
#ifndef P2PT_INTERNAL_H
#define P2PT_INTERNAL_H

#include "alloc_memo.h"
#include "args.h"
#include "auto.h"
#include "batch.h"
#include "batch_plan.h"
#include "block_plan.h"
#include "chunk_plan.h"
#include "coalesce.h"
#include "common.h"
#include "config.h"
#include "cubin_cache.h"
#include "driver.h"
#include "handle.h"
#include "handles.h"
#include "jit.h"
#include "launch.h"
#include "nvrtc_loader.h"
#include "operation.h"
#include "policy.h"
#include "registry.h"
#include "request.h"
#include "router.h"
#include "share.h"
#include "tma.h"
#include "transport.h"
#include "validate.h"
#include "windows.h"

#endif /* P2PT_INTERNAL_H */
