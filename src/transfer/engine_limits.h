/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sizes the handle's per-engine arrays need, CUDA-free.
 */
#ifndef P2PT_ENGINE_LIMITS_H
#define P2PT_ENGINE_LIMITS_H

/* Registered transports, at most (the registry checks it at compile time). */
#define P2PT_MAX_TRANSPORTS 4

#endif /* P2PT_ENGINE_LIMITS_H */
