//===- InsertSoftmaxGuards.cpp - guard every exponential ------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLA/Transforms/GuardAnalysis.h"
#include "smla/Dialect/SMLA/Transforms/Passes.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLAINSERTSOFTMAXGUARDS
#include "smla/Dialect/SMLA/Transforms/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
/// Where a value becomes available: the start of its block for a block
/// argument, right after its op otherwise.
std::pair<Block *, Block::iterator> availableFrom(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return {arg.getOwner(), arg.getOwner()->begin()};
  Operation *def = v.getDefiningOp();
  return {def->getBlock(), std::next(Block::iterator(def))};
}

/// The earliest point where both token and head block are defined: the row guard
/// is computed there once per row instead of once per top-k block.
OpBuilder rowGuardInsertionPoint(SoftmaxOp op) {
  auto [tokenBlock, tokenIt] = availableFrom(op.getToken());
  auto [groupBlock, groupIt] = availableFrom(op.getHeadBlock());
  OpBuilder b(op->getContext());
  bool groupInner =
      tokenBlock != groupBlock &&
      tokenBlock->getParent()->isAncestor(groupBlock->getParent());
  if (tokenBlock == groupBlock) {
    // Same block: whichever comes later.
    bool groupLater =
        groupIt == tokenBlock->end() ||
        (tokenIt != tokenBlock->end() && tokenIt->isBeforeInBlock(&*groupIt));
    groupInner = groupLater;
  }
  if (groupInner)
    b.setInsertionPoint(groupBlock, groupIt);
  else
    b.setInsertionPoint(tokenBlock, tokenIt);
  return b;
}

Value getOrBuildLive(SoftmaxOp op) {
  for (Operation *user : op.getLse().getUsers())
    if (auto live = dyn_cast<RowLiveOp>(user))
      if (live.getToken() == op.getToken() && live.getHeadBlock() == op.getHeadBlock())
        return live.getLive();
  OpBuilder b = rowGuardInsertionPoint(op);
  int64_t hg = op.getScores().getType().getDimSize(0);
  auto type = VectorType::get({hg}, b.getI1Type());
  return RowLiveOp::create(b, op.getLoc(), type, op.getLse(), op.getToken(),
                           op.getHeadBlock(), op.getCounters())
      .getLive();
}

struct SMLAInsertSoftmaxGuardsPass
    : public mlir::smla::impl::SMLAInsertSoftmaxGuardsBase<
          SMLAInsertSoftmaxGuardsPass> {
  void runOnOperation() override {
    WalkResult result = getOperation()->walk([&](SoftmaxOp op) {
      if (op.isGuarded())
        return WalkResult::advance();
      if (!op.getMask()) {
        GatherOp gather = findScoreGather(op);
        if (!gather || !gather.getMask()) {
          op.emitOpError() << "cannot find the index mask of the keys its "
                              "scores come from; run "
                              "smla-insert-index-masks first";
          return WalkResult::interrupt();
        }
        // A step of two tokens masks each token's rows with its own mask.
        if (auto pair = gather.getMask().getDefiningOp<IndexPairOp>()) {
          op.getMaskMutable().assign(pair.getFirstMask());
          op.getPairMaskMutable().assign(pair.getSecondKeeps());
        } else {
          op.getMaskMutable().assign(gather.getMask());
        }
      }
      if (!op.getLive())
        op.getLiveMutable().assign(getOrBuildLive(op));
      if (!op.getClamp())
        op.setClampAttr(
            FloatAttr::get(Float32Type::get(op->getContext()), kExp2Clamp));
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
