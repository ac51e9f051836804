/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every internal module header, for the tests and the benchmark (SQLite's
 * sqliteInt.h pattern). Library sources include only the headers of the
 * modules they use; frameworks never see any of them.
 *
 *   util/     common.h (status text, load-once, logger), config.h  (CUDA-free)
 *   plans/    chunk_plan.h, batch_plan.h: how copies and batches are cut up
 *                                                                  (CUDA-free)
 *   jit/      cubin_cache.h (CUDA-free), nvrtc_loader.h, jit.h
 *   cuda/     driver.h: the driver's entry points, contexts
 *   core/     request.h (one request, resolved), batch.h, windows.h,
 *             args.h, validate.h, policy.h, router.h (registry, routing),
 *             operation.h (the pipeline), handle.h
 *   auto/     auto.h (the auto policy), auto_table.h
 *   engines/  transport.h (what an engine is), launch.h (kernel launches),
 *             tma.h
 */
#ifndef P2PT_INTERNAL_H
#define P2PT_INTERNAL_H

#include "alloc_memo.h"
#include "args.h"
#include "auto.h"
#include "batch.h"
#include "batch_plan.h"
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
#include "tma.h"
#include "transport.h"
#include "validate.h"
#include "windows.h"

#endif /* P2PT_INTERNAL_H */
