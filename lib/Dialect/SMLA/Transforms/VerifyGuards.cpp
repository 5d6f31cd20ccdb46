//===- VerifyGuards.cpp - refuse unguarded memory accesses and exps -------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLA/Transforms/GuardAnalysis.h"
#include "smla/Dialect/SMLA/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLAVERIFYGUARDS
#include "smla/Dialect/SMLA/Transforms/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
LogicalResult verifyAccess(Operation *op, StringRef what, Value mask,
                           Value indices, Value tensor, Value token,
                           Value group) {
  std::string why = explainMaskMismatch(mask, indices, tensor);
  if (why.empty())
    why = explainIndexOrigin(indices, token, group);
  if (why.empty())
    return success();
  return op->emitOpError() << "is an unguarded " << what << ": " << why;
}

LogicalResult verifySoftmax(SoftmaxOp op) {
  if (!op.getClamp())
    return op.emitOpError() << "is an unguarded exponential: has no clamp";
  std::string why = explainLiveMismatch(op.getLive(), op);
  if (!why.empty())
    return op.emitOpError() << "is an unguarded exponential: " << why;
  if (!op.getMask())
    return op.emitOpError() << "is an unguarded exponential: has no index mask";
  GatherOp gather = findScoreGather(op);
  auto pair = gather && gather.getMask()
                  ? gather.getMask().getDefiningOp<IndexPairOp>()
                  : IndexPairOp();
  bool matches = pair ? op.getMask() == pair.getFirstMask() &&
                            op.getPairMask() == pair.getSecondKeeps()
                      : gather && gather.getMask() == op.getMask() &&
                            !op.getPairMask();
  if (!matches)
    return op.emitOpError() << "is an unguarded exponential: its mask is not "
                               "the mask of the keys its scores come from";
  // The keys must be its own token's (both tokens' for a pair).
  why = explainIndexOrigin(gather.getIndices(), op.getToken(),
                           gather.getGroup());
  if (!why.empty())
    return op.emitOpError() << "is an unguarded exponential: " << why;
  return success();
}

/// A lowered exponential must read a clamped exponent and be consumed only
/// as the chosen value of a select: the guard that makes P exactly 0.
LogicalResult verifyLoweredExp(Operation *exp) {
  Operation *clamp = exp->getOperand(0).getDefiningOp();
  bool clamped = false;
  if (clamp && isa<arith::MinimumFOp, arith::MinNumFOp>(clamp)) {
    for (Value bound : clamp->getOperands()) {
      FloatAttr attr;
      if (matchPattern(bound, m_Constant(&attr)) &&
          attr.getValueAsDouble() <= kMaxExp2Clamp)
        clamped = true;
    }
  }
  if (!clamped)
    return exp->emitOpError()
           << "is an unguarded exponential: its exponent is not clamped by "
              "a constant <= "
           << static_cast<int64_t>(kMaxExp2Clamp);
  for (OpOperand &use : exp->getResult(0).getUses()) {
    auto select = dyn_cast<arith::SelectOp>(use.getOwner());
    if (!select || use.getOperandNumber() != 1)
      return exp->emitOpError() << "is an unguarded exponential: its result "
                                   "is used outside the true branch of an "
                                   "arith.select";
    // The guard selects exactly zero for dead rows and invalid lanes.
    FloatAttr otherwise;
    if (!matchPattern(select.getFalseValue(), m_Constant(&otherwise)) ||
        !otherwise.getValue().isZero())
      return exp->emitOpError() << "is an unguarded exponential: the select "
                                   "that consumes it does not choose 0.0 "
                                   "otherwise";
  }
  return success();
}

struct SMLAVerifyGuardsPass
    : public mlir::smla::impl::SMLAVerifyGuardsBase<SMLAVerifyGuardsPass> {
  void runOnOperation() override {
    bool ok = true;
    getOperation()->walk([&](Operation *op) {
      LogicalResult result = success();
      if (isa<SparseAttentionBwdOp>(op))
        result = op->emitOpError()
                 << "has no guards; decompose it and insert guards "
                    "(smla-guarded pipeline) first";
      else if (auto gather = dyn_cast<GatherOp>(op))
        result =
            verifyAccess(op, "gather", gather.getMask(), gather.getIndices(),
                         gather.getKv(), Value(), gather.getGroup());
      else if (auto scatter = dyn_cast<ScatterDkvOp>(op))
        result = verifyAccess(op, "scatter", scatter.getMask(),
                              scatter.getIndices(), scatter.getDkv(),
                              scatter.getToken(), scatter.getGroup());
      else if (auto softmax = dyn_cast<SoftmaxOp>(op))
        result = verifySoftmax(softmax);
      else if (isa<math::Exp2Op, math::ExpOp>(op))
        result = verifyLoweredExp(op);
      ok &= succeeded(result);
    });
    if (!ok)
      signalPassFailure();
  }
};
} // namespace
