//===- Step.h - the tile ops the warp-specialized schedule restates -*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATOSMLAGPU_STEP_H
#define SMLA_CONVERSION_SMLATOSMLAGPU_STEP_H

#include "smla/Dialect/SMLA/IR/SMLA.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <string>

namespace mlir::smla {

/// The tile ops of one gpu-mapped bwd kernel that the schedule restates:
/// one of each, the step's inside one top-k block loop.
struct WarpSpecializedStep {
  DeltaOp delta;
  RowLiveOp live;
  scf::ForOp loop;
  GatherOp gather;
  TileDotOp scores, dp;
  SoftmaxOp softmax;
  DScoresOp dscores;
  DqAccumulateOp dq;
  ScatterDkvOp scatter;
  StoreDqOp store;
  SmallVector<linalg::FillOp> fills;
};

/// The step of `func`, or failure with `why` set.
FailureOr<WarpSpecializedStep> findWarpSpecializedStep(gpu::GPUFuncOp func,
                                                       std::string &why);

/// Dimension `i` of a shaped value.
inline int64_t dimOf(Value v, unsigned i) {
  return cast<ShapedType>(v.getType()).getDimSize(i);
}

} // namespace mlir::smla

#endif // SMLA_CONVERSION_SMLATOSMLAGPU_STEP_H
