//===- GuardAnalysis.h - where a tile's guard comes from --------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Tile ops communicate through small buffers (destination style), so "the
// mask of the keys these scores were computed from" is a walk backwards
// through the writers of those buffers. The guard passes and the guard
// verifier share these walks so that they agree on what guards what.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLA_TRANSFORMS_GUARDANALYSIS_H
#define SMLA_DIALECT_SMLA_TRANSFORMS_GUARDANALYSIS_H

#include "smla/Dialect/SMLA/IR/SMLA.h"

namespace mlir::smla {

/// The last op before `user`, in `user`'s block, that writes `buffer` as its
/// destination operand; null if there is none.
Operation *findLastWriter(Value buffer, Operation *user);

/// The gather that filled the key tile from which `softmax`'s scores were
/// computed (scores <- smla.tile_dot <- smla.gather); null if not found.
GatherOp findScoreGather(SoftmaxOp softmax);

/// Why `mask` does not guard an access of `tensor` through `indices`, or an
/// empty string when it does: the mask must be an smla.index_mask of the
/// same index block, bounded by dim 0 of `tensor`, with the tail lane count
/// of the block, and with the position limit the indices carry (if any).
std::string explainMaskMismatch(Value mask, Value indices, Value tensor);

/// Builds `min(dim(indices, 2) - offset, B)`, the number of real slots of
/// the block `load` reads: the lane count explainMaskMismatch accepts.
Value buildTailLaneCount(OpBuilder &b, Location loc, IndexLoadOp load);

/// Why `indices` are not the index block of the access at (`token`, `group`)
/// (`token` may be null for accesses that do not name one), or an empty
/// string when they are: the smla.index_load must read the same token and
/// group, and its position limit, if any, must be `positions[token]`.
std::string explainIndexOrigin(Value indices, Value token, Value group);

/// Why `live` is not the dead-row guard of `softmax`'s lse row, or an empty
/// string when it is.
std::string explainLiveMismatch(Value live, SoftmaxOp softmax);

} // namespace mlir::smla

#endif // SMLA_DIALECT_SMLA_TRANSFORMS_GUARDANALYSIS_H
