//===- GuardAnalysis.cpp - where a tile's guard comes from ----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLA/Transforms/GuardAnalysis.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::smla;

/// The destination buffer of a tile op, if it has one.
static Value destinationOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, Value>(op)
      .Case([](GatherOp o) { return o.getTile(); })
      .Case([](TileDotOp o) { return o.getResult(); })
      .Case([](SoftmaxOp o) { return o.getProbs(); })
      .Case([](DScoresOp o) { return o.getDs(); })
      .Case([](DqAccumulateOp o) { return o.getAcc(); })
      .Case([](DeltaOp o) { return o.getDelta(); })
      .Default([](Operation *) { return Value(); });
}

Operation *mlir::smla::findLastWriter(Value buffer, Operation *user) {
  for (Operation *op = user->getPrevNode(); op; op = op->getPrevNode())
    if (destinationOf(op) == buffer)
      return op;
  return nullptr;
}

GatherOp mlir::smla::findScoreGather(SoftmaxOp softmax) {
  auto dot =
      dyn_cast_or_null<TileDotOp>(findLastWriter(softmax.getScores(), softmax));
  if (!dot)
    return {};
  return dyn_cast_or_null<GatherOp>(findLastWriter(dot.getTile(), dot));
}

static bool isDimZeroOf(Value v, Value tensor) {
  auto dim = v.getDefiningOp<memref::DimOp>();
  return dim && dim.getSource() == tensor &&
         matchPattern(dim.getIndex(), m_Zero());
}

/// lanes == min(K - offset, B), K = the load's length, else dim(indices, 2)
static bool isTailLaneCount(Value lanes, IndexLoadOp load) {
  auto min = lanes.getDefiningOp<arith::MinSIOp>();
  if (!min)
    return false;
  int64_t block = load.getResult().getType().getNumElements();
  for (auto [left, cap] : {std::pair{min.getLhs(), min.getRhs()},
                           std::pair{min.getRhs(), min.getLhs()}}) {
    APInt capValue;
    auto sub = left.getDefiningOp<arith::SubIOp>();
    if (!sub || !matchPattern(cap, m_ConstantInt(&capValue)) ||
        capValue.getSExtValue() != block || sub.getRhs() != load.getOffset())
      continue;
    if (Value length = load.getLength()) {
      if (sub.getLhs() == length)
        return true;
      continue;
    }
    auto dim = sub.getLhs().getDefiningOp<memref::DimOp>();
    APInt dimIndex;
    if (dim && dim.getSource() == load.getIndices() &&
        matchPattern(dim.getIndex(), m_ConstantInt(&dimIndex)) && dimIndex == 2)
      return true;
  }
  return false;
}

Value mlir::smla::buildTailLaneCount(OpBuilder &b, Location loc,
                                     IndexLoadOp load) {
  int64_t block = load.getResult().getType().getNumElements();
  Value c2 = arith::ConstantIndexOp::create(b, loc, 2);
  Value cBlock = arith::ConstantIndexOp::create(b, loc, block);
  Value topk = load.getLength();
  if (!topk)
    topk = memref::DimOp::create(b, loc, load.getIndices(), c2);
  Value left = arith::SubIOp::create(b, loc, topk, load.getOffset());
  return arith::MinSIOp::create(b, loc, left, cBlock);
}

std::string mlir::smla::explainMaskMismatch(Value mask, Value indices,
                                            Value tensor) {
  if (!mask)
    return "has no index mask";
  // A step of two tokens: both tokens' masks must guard their own block.
  if (auto pair = mask.getDefiningOp<IndexPairOp>()) {
    if (pair.getIndices() != indices)
      return "mask was built from a different index block";
    for (auto [m, i] : {std::pair{pair.getFirstMask(), pair.getFirst()},
                        std::pair{pair.getSecondMask(), pair.getSecond()}}) {
      std::string why = explainMaskMismatch(m, i, tensor);
      if (!why.empty())
        return "in its index pair: " + why;
    }
    return "";
  }
  if (indices.getDefiningOp<IndexPairOp>())
    return "mask is not the mask of its index pair";
  auto maskOp = mask.getDefiningOp<IndexMaskOp>();
  if (!maskOp)
    return "mask is not produced by smla.index_mask";
  if (maskOp.getIndices() != indices)
    return "mask was built from a different index block";
  if (!isDimZeroOf(maskOp.getBound(), tensor))
    return "mask bound is not dim 0 of the tensor this op accesses";
  auto load = indices.getDefiningOp<IndexLoadOp>();
  if (!load)
    return "indices are not produced by smla.index_load";
  if (!isTailLaneCount(maskOp.getLanes(), load))
    return "mask lane count is not min(K - offset, block) of its index block";
  if (load.getLimit() != maskOp.getLimit())
    return load.getLimit() ? "mask ignores the position limit of its indices"
                           : "mask has a limit its indices do not carry";
  return "";
}

/// Whether `v` is `base * 2`: the first index row of folded token `base`,
/// as smla-decompose builds it.
static bool isPairToken(Value v, Value base) {
  auto mul = v.getDefiningOp<arith::MulIOp>();
  APInt factor;
  return mul && mul.getLhs() == base &&
         matchPattern(mul.getRhs(), m_ConstantInt(&factor)) && factor == 2;
}

std::string mlir::smla::explainIndexOrigin(Value indices, Value token,
                                           Value group) {
  if (auto pair = indices.getDefiningOp<IndexPairOp>()) {
    auto first = pair.getFirst().getDefiningOp<IndexLoadOp>();
    auto second = pair.getSecond().getDefiningOp<IndexLoadOp>();
    if (!first || !second)
      return "indices are not produced by smla.index_load";
    if (first.getOffset() != second.getOffset())
      return "the index pair's blocks are at different offsets";
    auto next = second.getToken().getDefiningOp<arith::AddIOp>();
    if (!next || next.getLhs() != first.getToken() ||
        !matchPattern(next.getRhs(), m_One()))
      return "the index pair's rows are not consecutive tokens";
    if (token && !isPairToken(first.getToken(), token))
      return "the index pair's rows are not tokens 2t and 2t + 1 of its "
             "folded token t";
    for (Value part : {pair.getFirst(), pair.getSecond()}) {
      std::string why = explainIndexOrigin(part, Value(), group);
      if (!why.empty())
        return why;
    }
    return "";
  }
  auto load = indices.getDefiningOp<IndexLoadOp>();
  if (!load)
    return "indices are not produced by smla.index_load";
  if (load.getGroup() != group || (token && load.getToken() != token))
    return "indices were loaded for a different token or group";
  if (Value limit = load.getLimit()) {
    auto position = limit.getDefiningOp<memref::LoadOp>();
    if (!position || position.getIndices().size() != 1 ||
        position.getIndices()[0] != load.getToken())
      return "the position limit of its indices is not positions[token]";
  }
  return "";
}

std::string mlir::smla::explainLiveMismatch(Value live, SoftmaxOp softmax) {
  if (!live)
    return "has no live-row guard";
  auto rowLive = live.getDefiningOp<RowLiveOp>();
  if (!rowLive)
    return "live rows are not produced by smla.row_live";
  if (rowLive.getLse() != softmax.getLse() ||
      rowLive.getToken() != softmax.getToken() ||
      rowLive.getHeadBlock() != softmax.getHeadBlock())
    return "live rows were computed for a different lse row";
  return "";
}
