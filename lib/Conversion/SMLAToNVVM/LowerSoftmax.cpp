//===- LowerSoftmax.cpp - softmax and dS against the forward's lse --------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//   softmax   p[h, j] = mask[j] && live[h] ? exp2(min(s k - lse2[h], clamp))
//                                           : 0        (k = scale * log2e)
//   dscores   ds[h, j] = p != 0 ? p (dp - delta[h]) scale : 0
//
// The elements themselves (softmaxElement, dscoreElement) are shared with
// the fused epilogue (LowerEpilogueWgmma.cpp), which runs them on the
// block products' accumulators. Here the ops run over their [rows, block]
// tiles: per thread, one column and its rows, where the CTA covers the
// tile in whole passes (columnPasses; the mask evaluated once, the rows'
// lse loads issued together), else as a CTA loop. Both ops visit element
// (h, j) in the same thread (Barriers.cpp's same-thread rule relies on it).
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

using namespace mlir;
using namespace mlir::smla;

Value mlir::smla::runtimeScale(Operation *op) {
  auto func = op->getParentOfType<gpu::GPUFuncOp>();
  if (!func)
    return {};
  auto names = func->getAttrOfType<ArrayAttr>(kParamNamesAttr);
  if (!names)
    return {};
  for (auto [i, a] : llvm::enumerate(names))
    if (cast<StringAttr>(a).getValue() == kScaleParam &&
        i < func.getNumArguments() && func.getArgument(i).getType().isF32())
      return func.getArgument(i);
  return {};
}

Value mlir::smla::scaleValue(OpBuilder &b, Location loc, Operation *op,
                             double attrScale, double factor) {
  if (Value arg = runtimeScale(op)) {
    if (factor == 1.0)
      return arg;
    return arith::MulFOp::create(
        b, loc, arg,
        arith::ConstantOp::create(b, loc, b.getF32FloatAttr(factor)));
  }
  return arith::ConstantOp::create(b, loc,
                                   b.getF32FloatAttr(attrScale * factor));
}

Value mlir::smla::softmaxRowLse(OpBuilder &b, Location loc, SoftmaxOp op,
                                Value h) {
  int64_t hg = op.getScores().getType().getDimSize(0);
  Value head = headIndex(b, loc, op.getHeadBlock(), hg, h);
  Value lse = memref::LoadOp::create(b, loc, op.getLse(),
                                     ValueRange{op.getToken(), head});
  if (op.getBase() == LseBase::BaseE)
    lse = arith::MulFOp::create(
        b, loc, lse,
        arith::ConstantOp::create(b, loc,
                                  b.getF32FloatAttr(1.4426950408889634)));
  return lse;
}

Value mlir::smla::softmaxElement(OpBuilder &b, Location loc, SoftmaxOp op,
                                 Value k, Value s, Value lse,
                                 llvm::function_ref<Value()> okFn,
                                 llvm::function_ref<void(Value)> use,
                                 Value *clamped) {
  double clamp = op.getClamp()->convertToDouble();
  Value x2 =
      arith::SubFOp::create(b, loc, arith::MulFOp::create(b, loc, s, k), lse);
  Value bound = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(clamp));
  Value xc = arith::MinimumFOp::create(b, loc, x2, bound);
  Value ex = math::Exp2Op::create(b, loc, xc);
  Value ok = okFn();
  Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
  Value p = arith::SelectOp::create(b, loc, ok, ex, zero);
  use(p);
  if (Value counters = op.getCounters()) {
    Value over =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, x2, bound);
    Value fire = arith::AndIOp::create(b, loc, ok, over);
    if (clamped)
      *clamped = fire;
    else
      emitCount(b, loc, counters, kClamped, fire);
  }
  return p;
}

Value mlir::smla::dscoreElement(OpBuilder &b, Location loc, Value p, Value dp,
                                Value delta, Value scale) {
  Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
  Value ds = arith::MulFOp::create(
      b, loc,
      arith::MulFOp::create(b, loc, p,
                            arith::SubFOp::create(b, loc, dp, delta)),
      scale);
  // P == 0 (masked, dead or underflowed) gives exactly 0.
  Value nonzero =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ONE, p, zero);
  return arith::SelectOp::create(b, loc, nonzero, ds, zero);
}

namespace mlir::smla {

/// The passes an elementwise [hg, block] op takes when every thread keeps
/// one column: with threads a multiple of block and hg * block a multiple
/// of threads, thread t takes column t % block of rows t / block + i *
/// (threads / block), i < passes. Such ops are emitted per thread,
/// unrolled, instead of as a CTA loop: the passes' loads issue together.
static std::optional<int64_t> columnPasses(int64_t threads, int64_t hg,
                                           int64_t block) {
  if (threads % block || (hg * block) % threads || hg * block / threads > 8)
    return std::nullopt;
  return hg * block / threads;
}

/// The thread's column and its rows under columnPasses: (t % block,
/// [t / block + i * (threads / block) for i < passes]).
static std::pair<Value, SmallVector<Value>>
columnRows(CtaEmitter &e, int64_t block, int64_t passes) {
  Value j = arith::RemUIOp::create(e.b, e.loc, e.tid, e.index(block));
  Value h0 = arith::DivUIOp::create(e.b, e.loc, e.tid, e.index(block));
  SmallVector<Value> rows;
  for (int64_t i = 0; i < passes; ++i)
    rows.push_back(arith::AddIOp::create(e.b, e.loc, h0,
                                         e.index(i * (e.threads / block))));
  return {j, rows};
}

LogicalResult lowerSoftmax(CtaEmitter &e, SoftmaxOp op, const LaneMap &lanes) {
  if (!op.isGuarded())
    return op.emitOpError() << "is unguarded; run the smla-guarded "
                               "pipeline before the GPU lowering";
  auto type = op.getScores().getType();
  int64_t hg = type.getDimSize(0), block = type.getDimSize(1);
  Value k = softmaxScaleLog2(e, op);
  auto lane = [&](Value vec, OpBuilder &b, Location loc, Value j) {
    return lanes.lookup(vec)(b, loc, j);
  };
  // Row h's lse in log2 units and whether the row is live.
  auto rowLse = [&](OpBuilder &b, Location loc, Value h) {
    return std::pair{softmaxRowLse(b, loc, op, h),
                     lane(op.getLive(), b, loc, h)};
  };
  // Element (h, j), given row h's lse and liveness and column j's mask.
  auto element = [&](OpBuilder &b, Location loc, Value h, Value j, Value lse,
                     Value live, Value keyOk) {
    Value s = memref::LoadOp::create(b, loc, op.getScores(), ValueRange{h, j});
    auto ok = [&]() -> Value {
      // A step of two tokens: rows hg/2.. belong to the second token.
      if (Value pair = op.getPairMask()) {
        Value second = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::uge, h,
            arith::ConstantIndexOp::create(b, loc, hg / 2));
        keyOk = arith::SelectOp::create(b, loc, second, lane(pair, b, loc, j),
                                        keyOk);
      }
      return arith::AndIOp::create(b, loc, keyOk, live);
    };
    softmaxElement(b, loc, op, k, s, lse, ok, [&](Value p) {
      memref::StoreOp::create(b, loc, p, op.getProbs(), ValueRange{h, j});
    });
  };
  if (std::optional<int64_t> passes = columnPasses(e.threads, hg, block)) {
    // Per thread: one column, so its mask once, and its rows' lse loads
    // issued together. (Loaded before the block loop instead, the lse
    // and liveness of B1's rows made the H = 64 kernel spill.)
    OpBuilder &b = e.b;
    Location loc = e.loc;
    auto [j, rows] = columnRows(e, block, *passes);
    SmallVector<Value> lses, lives;
    for (Value h : rows) {
      auto [lse, live] = rowLse(b, loc, h);
      lses.push_back(lse);
      lives.push_back(live);
    }
    Value keyOk = lane(op.getMask(), b, loc, j);
    for (int64_t i = 0; i < *passes; ++i)
      element(b, loc, rows[i], j, lses[i], lives[i], keyOk);
    return success();
  }
  e.ctaLoop(hg * block, [&](OpBuilder &b, Value q) {
    Location loc = e.loc;
    auto [h, j] = splitRow(b, loc, q, block);
    auto [lse, live] = rowLse(b, loc, h);
    element(b, loc, h, j, lse, live, lane(op.getMask(), b, loc, j));
  });
  return success();
}

Value softmaxScaleLog2(CtaEmitter &e, SoftmaxOp op) {
  return scaleValue(e.b, e.loc, op, op.getScale().convertToDouble(),
                    1.4426950408889634);
}

void lowerDScores(CtaEmitter &e, DScoresOp op) {
  auto type = op.getProbs().getType();
  int64_t hg = type.getDimSize(0), block = type.getDimSize(1);
  Value scale =
      scaleValue(e.b, e.loc, op, op.getScale().convertToDouble(), 1.0);
  auto element = [&](OpBuilder &b, Location loc, Value h, Value j) {
    Value p = memref::LoadOp::create(b, loc, op.getProbs(), ValueRange{h, j});
    Value dp = memref::LoadOp::create(b, loc, op.getDp(), ValueRange{h, j});
    Value delta = memref::LoadOp::create(b, loc, op.getDelta(), ValueRange{h});
    Value ds = dscoreElement(b, loc, p, dp, delta, scale);
    memref::StoreOp::create(b, loc, ds, op.getDs(), ValueRange{h, j});
  };
  // The same element-to-thread map as softmax (Barriers.cpp relies on it).
  if (std::optional<int64_t> passes = columnPasses(e.threads, hg, block)) {
    auto [j, rows] = columnRows(e, block, *passes);
    for (Value h : rows)
      element(e.b, e.loc, h, j);
    return;
  }
  e.ctaLoop(hg * block, [&](OpBuilder &b, Value q) {
    auto [h, j] = splitRow(b, e.loc, q, block);
    element(b, e.loc, h, j);
  });
}

} // namespace mlir::smla
