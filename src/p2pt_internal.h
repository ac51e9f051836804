/*
 * Every internal module header, for the tests and the benchmark (SQLite's
 * sqliteInt.h pattern). Library sources include only the headers of the
 * modules they use; frameworks never see any of them.
 *
 *   common.h        status text, load-once, logger          (CUDA-free)
 *   config.h        environment and init options            (CUDA-free)
 *   chunk_plan.h    how a copy is cut up                     (CUDA-free)
 *   batch_plan.h    how a host batch becomes launches        (CUDA-free)
 *   cubin_cache.h   cubins on disk                           (CUDA-free)
 *   driver.h        the driver's entry points, contexts
 *   nvrtc_loader.h  NVRTC's entry points
 *   jit.h           kernels described to the JIT, modules
 *   request.h       one request, resolved; validation
 *   batch.h         batches and registered windows
 *   transport.h     transports and the router
 *   handle.h        handles and their registry
 */
#ifndef P2PT_INTERNAL_H
#define P2PT_INTERNAL_H

#include "batch.h"
#include "batch_plan.h"
#include "chunk_plan.h"
#include "common.h"
#include "config.h"
#include "cubin_cache.h"
#include "driver.h"
#include "handle.h"
#include "jit.h"
#include "nvrtc_loader.h"
#include "request.h"
#include "tma.h"
#include "transport.h"

#endif /* P2PT_INTERNAL_H */
