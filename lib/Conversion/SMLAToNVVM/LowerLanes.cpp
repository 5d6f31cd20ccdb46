//===- LowerLanes.cpp - index blocks, masks and live rows as lanes --------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// smla.index_load, index_mask, index_pair and row_live produce small
// vectors that later tile ops read one lane at a time (the gather's row j,
// the softmax's mask of column j, ...). They are lowered to lane functions:
// each reading op emits the lane's value where it needs it, in the thread
// that needs it, so no vector is ever materialised in memory. Only their
// guard counters (invalid slots, dead rows) are emitted in place.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

using namespace mlir;
using namespace mlir::smla;

void mlir::smla::lowerIndexLoadLanes(IndexLoadOp op, LaneMap &lanes) {
  Value indices = op.getIndices(), t = op.getToken(), g = op.getGroup();
  Value offset = op.getOffset(), length = op.getLength();
  lanes[op.getResult()] = [=](OpBuilder &b, Location loc, Value j) {
    // Lanes past K (or the token's length, at most K) read nothing: their
    // load goes to slot `offset` (< K) and the value is replaced by -1.
    Value k = length ? length : memref::DimOp::create(b, loc, indices, 2);
    Value at = arith::AddIOp::create(b, loc, offset, j);
    Value inside =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, at, k);
    Value safe = arith::SelectOp::create(b, loc, inside, at, offset);
    Value v = memref::LoadOp::create(b, loc, indices, ValueRange{t, g, safe});
    Value pad = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(-1));
    return arith::SelectOp::create(b, loc, inside, v, pad).getResult();
  };
}

void mlir::smla::lowerIndexMaskLanes(CtaEmitter &e, IndexMaskOp op,
                                    LaneMap &lanes) {
  Value idxVec = op.getIndices(), bound = op.getBound();
  Value lanesN = op.getLanes(), limit = op.getLimit();
  LaneFn idxLane = lanes.lookup(idxVec);
  auto inLane = [=](OpBuilder &b, Location loc, Value j) -> Value {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, j,
                                 lanesN);
  };
  LaneFn valid = [=](OpBuilder &b, Location loc, Value j) -> Value {
    Value raw = idxLane(b, loc, j);
    Value idx = arith::IndexCastOp::create(b, loc, b.getIndexType(), raw);
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value ok = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, idx, zero),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, idx, bound));
    ok = arith::AndIOp::create(b, loc, ok, inLane(b, loc, j));
    if (limit) {
      Value lim = arith::IndexCastOp::create(b, loc, b.getIndexType(), limit);
      ok = arith::AndIOp::create(
          b, loc, ok,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, idx, lim));
    }
    return ok;
  };
  lanes[op.getMask()] = valid;
  if (Value counters = op.getCounters()) {
    int64_t block = op.getIndices().getType().getNumElements();
    e.ctaLoop(block, [&](OpBuilder &b, Value j) {
      Value ok = valid(b, e.loc, j);
      Value one = arith::ConstantOp::create(b, e.loc, b.getBoolAttr(true));
      Value bad = arith::AndIOp::create(
          b, e.loc, arith::XOrIOp::create(b, e.loc, ok, one),
          inLane(b, e.loc, j));
      emitCount(b, e.loc, counters, kInvalidSlots, bad);
    });
  }
}

/// Lane j of a two-token step: the first token's slot where its mask
/// holds, else the second's; valid where either is.
void mlir::smla::lowerIndexPairLanes(IndexPairOp op, LaneMap &lanes) {
  LaneFn first = lanes.lookup(op.getFirst());
  LaneFn second = lanes.lookup(op.getSecond());
  LaneFn firstOk = lanes.lookup(op.getFirstMask());
  LaneFn secondOk = lanes.lookup(op.getSecondMask());
  lanes[op.getIndices()] = [=](OpBuilder &b, Location loc, Value j) {
    return arith::SelectOp::create(b, loc, firstOk(b, loc, j),
                                   first(b, loc, j), second(b, loc, j))
        .getResult();
  };
  lanes[op.getMask()] = [=](OpBuilder &b, Location loc, Value j) {
    return arith::OrIOp::create(b, loc, firstOk(b, loc, j),
                                secondOk(b, loc, j))
        .getResult();
  };
  // The second token keeps lane j only if the lane holds its own key.
  lanes[op.getSecondKeeps()] = [=](OpBuilder &b, Location loc, Value j) {
    Value same = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                       first(b, loc, j), second(b, loc, j));
    Value other = arith::XOrIOp::create(
        b, loc, firstOk(b, loc, j),
        arith::ConstantOp::create(b, loc, b.getBoolAttr(true)));
    return arith::AndIOp::create(b, loc, secondOk(b, loc, j),
                                 arith::OrIOp::create(b, loc, other, same))
        .getResult();
  };
}

void mlir::smla::lowerRowLiveLanes(CtaEmitter &e, RowLiveOp op,
                                  LaneMap &lanes) {
  int64_t hg = op.getLive().getType().getNumElements();
  Value lse = op.getLse(), t = op.getToken(), g = op.getHeadBlock();
  LaneFn live = [=](OpBuilder &b, Location loc, Value h) -> Value {
    Value head = headIndex(b, loc, g, hg, h);
    Value v = memref::LoadOp::create(b, loc, lse, ValueRange{t, head});
    Value mag = math::AbsFOp::create(b, loc, v);
    Value inf =
        arith::ConstantOp::create(b, loc, b.getF32FloatAttr(INFINITY));
    // Ordered: false for +-inf and NaN.
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, mag, inf);
  };
  lanes[op.getLive()] = live;
  if (Value counters = op.getCounters())
    e.ctaLoop(hg, [&](OpBuilder &b, Value h) {
      Value one = arith::ConstantOp::create(b, e.loc, b.getBoolAttr(true));
      Value dead = arith::XOrIOp::create(b, e.loc, live(b, e.loc, h), one);
      emitCount(b, e.loc, counters, kDeadRows, dead);
    });
}
