//===- SMLAToLoops.h - smla tile ops to loops -------------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATOLOOPS_SMLATOLOOPS_H
#define SMLA_CONVERSION_SMLATOLOOPS_SMLATOLOOPS_H

#include "smla/Dialect/SMLA/IR/SMLA.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::smla {

#define GEN_PASS_DECL_SMLALOWERTOLOOPS
#include "smla/Conversion/Passes.h.inc"

/// Rewrites one smla tile op into loops at its position and erases it.
/// Fails (with a diagnostic) on smla.sparse_attention_bwd, which must be
/// decomposed first.
LogicalResult lowerTileOpToLoops(Operation *op);

} // namespace mlir::smla

#endif // SMLA_CONVERSION_SMLATOLOOPS_SMLATOLOOPS_H
