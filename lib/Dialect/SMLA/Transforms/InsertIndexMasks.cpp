//===- InsertIndexMasks.cpp - guard gathers and scatters ------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLA/Transforms/GuardAnalysis.h"
#include "smla/Dialect/SMLA/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLAINSERTINDEXMASKS
#include "smla/Dialect/SMLA/Transforms/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
FailureOr<Value> getOrBuildMask(Operation *user, Value indices, Value tensor);

/// The mask of an access through an index pair (a step of two tokens). The
/// pair's own masks guard the tensor they were built against (kv, in
/// smla-decompose); an access of another tensor (the dKV scatter) gets a
/// copy of the pair whose masks guard that tensor, and reads its indices.
FailureOr<Value> getOrBuildPairMask(Operation *user, OpOperand &indices,
                                    Value tensor) {
  auto pair = indices.get().getDefiningOp<IndexPairOp>();
  if (explainMaskMismatch(pair.getMask(), pair.getIndices(), tensor).empty())
    return pair.getMask();
  FailureOr<Value> first = getOrBuildMask(user, pair.getFirst(), tensor);
  FailureOr<Value> second = getOrBuildMask(user, pair.getSecond(), tensor);
  if (failed(first) || failed(second))
    return failure();
  OpBuilder b(user);
  auto copy = IndexPairOp::create(b, pair.getLoc(), pair.getFirst(), *first,
                                  pair.getSecond(), *second);
  indices.set(copy.getIndices());
  return copy.getMask();
}

/// The mask of an access of `tensor` through the indices in `indices`.
FailureOr<Value> maskFor(Operation *user, OpOperand &indices, Value tensor) {
  if (indices.get().getDefiningOp<IndexPairOp>())
    return getOrBuildPairMask(user, indices, tensor);
  return getOrBuildMask(user, indices.get(), tensor);
}

/// Returns the validity mask of `indices` for accesses of `tensor`, reusing
/// one that already guards exactly that, else building it. Only the first
/// mask of a block counts invalid slots.
FailureOr<Value> getOrBuildMask(Operation *user, Value indices, Value tensor) {
  auto load = indices.getDefiningOp<IndexLoadOp>();
  if (!load)
    return user->emitOpError()
           << "indices must come from smla.index_load to be masked";
  bool counted = false;
  for (Operation *other : indices.getUsers()) {
    auto mask = dyn_cast<IndexMaskOp>(other);
    if (!mask)
      continue;
    counted |= static_cast<bool>(mask.getCounters());
    if (explainMaskMismatch(mask.getMask(), indices, tensor).empty())
      return mask.getMask();
  }

  // Built right before the access it guards, so that it reads next to it.
  OpBuilder b(user);
  Location loc = load.getLoc();
  int64_t block = load.getResult().getType().getNumElements();
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
  Value bound = memref::DimOp::create(b, loc, tensor, c0);
  Value lanes = buildTailLaneCount(b, loc, load);
  Value counters = counted ? Value() : load.getCounters();
  auto maskType = VectorType::get({block}, b.getI1Type());
  return IndexMaskOp::create(b, loc, maskType, indices, bound, lanes,
                             load.getLimit(), counters)
      .getMask();
}

struct SMLAInsertIndexMasksPass
    : public mlir::smla::impl::SMLAInsertIndexMasksBase<
          SMLAInsertIndexMasksPass> {
  void runOnOperation() override {
    WalkResult result = getOperation()->walk([&](Operation *op) {
      if (auto gather = dyn_cast<GatherOp>(op)) {
        if (gather.getMask())
          return WalkResult::advance();
        FailureOr<Value> mask =
            maskFor(op, gather.getIndicesMutable(), gather.getKv());
        if (failed(mask))
          return WalkResult::interrupt();
        gather.getMaskMutable().assign(*mask);
      } else if (auto scatter = dyn_cast<ScatterDkvOp>(op)) {
        if (scatter.getMask())
          return WalkResult::advance();
        FailureOr<Value> mask =
            maskFor(op, scatter.getIndicesMutable(), scatter.getDkv());
        if (failed(mask))
          return WalkResult::interrupt();
        scatter.getMaskMutable().assign(*mask);
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
