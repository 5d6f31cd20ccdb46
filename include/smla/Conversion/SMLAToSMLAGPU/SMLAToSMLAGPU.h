//===- SMLAToSMLAGPU.h - tile loop nest -> warp-specialized schedule -*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// smla-schedule-warp-specialized: the guarded tile loop nest of a bwd
// gpu.func (smla-gpu-map) restated as an smla_gpu schedule: a producer
// warpgroup that fills key stages, a softmax warpgroup and a dKV
// warpgroup (docs/schedule.md).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATOSMLAGPU_SMLATOSMLAGPU_H
#define SMLA_CONVERSION_SMLATOSMLAGPU_SMLATOSMLAGPU_H

#include "smla/Dialect/SMLA/IR/SMLA.h"
#include "smla/Dialect/SMLAGPU/IR/SMLAGPU.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Pass/Pass.h"

namespace mlir::smla {

#define GEN_PASS_DECL_SMLASCHEDULEWARPSPECIALIZED
#include "smla/Conversion/Passes.h.inc"

/// The rows of one CTA of the warp-specialized schedule (the M of every
/// product) and of one key stage.
constexpr int64_t kWsRows = 64;
constexpr int64_t kWsKeys = 64;
/// The dQ columns the softmax warpgroup accumulates (from dS in its
/// registers); the dKV warpgroup takes the rest.
constexpr int64_t kWsSoftmaxDqColumns = 256;
/// Registers per thread of the producer and of each consumer warpgroup:
/// 384 threads start with 168 each (65536 / 384, rounded down to 8), and
/// setmaxnreg moves registers between roles within that pool.
constexpr int32_t kWsProducerRegisters = 24;
constexpr int32_t kWsConsumerRegisters = 240;

/// Whether `func` (a bwd gpu.func of smla-gpu-map) is one the schedule
/// takes, else why not.
std::string whyNotWarpSpecialized(gpu::GPUFuncOp func);

} // namespace mlir::smla

#endif // SMLA_CONVERSION_SMLATOSMLAGPU_SMLATOSMLAGPU_H
