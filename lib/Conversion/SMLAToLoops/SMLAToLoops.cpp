//===- SMLAToLoops.cpp - smla tile ops to scf loops -----------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// The CPU execution path. Each tile op becomes plain loops; the guards
// become the compares, selects and scf.if regions that the lit tests pin.
// Speed is not a goal here: this path exists so that the semantics of the
// decomposed, guarded IR are executed and checked where there is no GPU.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLALOWERTOLOOPS
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
using BodyFn = function_ref<void(OpBuilder &, Value)>;
using ReduceFn = function_ref<Value(OpBuilder &, Value, Value)>;

/// Emits helpers at one insertion point.
class LoopEmitter {
public:
  LoopEmitter(Operation *op) : b(op), loc(op->getLoc()) {}

  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value f32(double v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value dim(Value memref, int64_t i) {
    return memref::DimOp::create(b, loc, memref, i);
  }

  /// for (iv = 0; iv < ub; ++iv) body(iv)
  static void loop(OpBuilder &b, Location loc, Value ub, BodyFn body) {
    Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
    Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
    scf::ForOp::create(b, loc, c0, ub, c1, ValueRange{},
                       [&](OpBuilder &nb, Location l, Value iv, ValueRange) {
                         body(nb, iv);
                         scf::YieldOp::create(nb, l);
                       });
  }
  void loop(Value ub, BodyFn body) { loop(b, loc, ub, body); }

  /// acc = init; for (iv = 0; iv < ub; ++iv) acc = step(iv, acc); return acc
  static Value reduce(OpBuilder &b, Location loc, Value ub, Value init,
                      ReduceFn step) {
    Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
    Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
    auto forOp = scf::ForOp::create(
        b, loc, c0, ub, c1, ValueRange{init},
        [&](OpBuilder &nb, Location l, Value iv, ValueRange args) {
          scf::YieldOp::create(nb, l, step(nb, iv, args[0]));
        });
    return forOp.getResult(0);
  }

  OpBuilder b;
  Location loc;
};

/// Loads an element and widens bf16 to f32.
Value loadF32(OpBuilder &b, Location loc, Value memref, ValueRange idx) {
  Value v = memref::LoadOp::create(b, loc, memref, idx);
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}

/// Stores an f32, rounding to the memref's element type; returns the
/// stored value.
Value storeRounded(OpBuilder &b, Location loc, Value v, Value memref,
                   ValueRange idx) {
  Type elem = cast<MemRefType>(memref.getType()).getElementType();
  if (elem != v.getType())
    v = arith::TruncFOp::create(b, loc, elem, v);
  memref::StoreOp::create(b, loc, v, memref, idx);
  return v;
}

/// Head index hb * Hb + h (Hb: the rows of the op's tile).
Value headOf(OpBuilder &b, Location loc, Value block, int64_t hb, Value h) {
  Value base = arith::MulIOp::create(
      b, loc, block, arith::ConstantIndexOp::create(b, loc, hb));
  return arith::AddIOp::create(b, loc, base, h);
}

Value extractLane(OpBuilder &b, Location loc, Value vec, Value lane) {
  return vector::ExtractOp::create(b, loc, vec, OpFoldResult(lane));
}

/// counters[slot] += sum(zext(bits)) for a vector of i1.
void addCount(OpBuilder &b, Location loc, Value counters, int64_t slot,
              Value bits) {
  auto vecType = cast<VectorType>(bits.getType());
  auto i64Vec = VectorType::get(vecType.getShape(), b.getI64Type());
  Value wide = arith::ExtUIOp::create(b, loc, i64Vec, bits);
  Value sum =
      vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, wide);
  Value idx = arith::ConstantIndexOp::create(b, loc, slot);
  Value old = memref::LoadOp::create(b, loc, counters, ValueRange{idx});
  Value updated = arith::AddIOp::create(b, loc, old, sum);
  memref::StoreOp::create(b, loc, updated, counters, ValueRange{idx});
}

//===----------------------------------------------------------------------===//
// One lowering per op.
//===----------------------------------------------------------------------===//

void lower(DeltaOp op) {
  LoopEmitter e(op);
  int64_t hg = op.getDelta().getType().getDimSize(0);
  Value width = e.dim(op.getO(), 2);
  e.loop(e.index(hg), [&](OpBuilder &b, Value h) {
    Value head = headOf(b, e.loc, op.getHeadBlock(), hg, h);
    if (Value given = op.getGiven()) {
      Value v = memref::LoadOp::create(b, e.loc, given,
                                       ValueRange{op.getToken(), head});
      memref::StoreOp::create(b, e.loc, v, op.getDelta(), ValueRange{h});
      return;
    }
    Value zero = arith::ConstantOp::create(b, e.loc, b.getF32FloatAttr(0));
    Value sum = LoopEmitter::reduce(
        b, e.loc, width, zero, [&](OpBuilder &b, Value c, Value acc) {
          ValueRange at{op.getToken(), head, c};
          Value o = loadF32(b, e.loc, op.getO(), at);
          Value d = loadF32(b, e.loc, op.getDout(), at);
          return arith::AddFOp::create(b, e.loc, acc,
                                       arith::MulFOp::create(b, e.loc, o, d));
        });
    memref::StoreOp::create(b, e.loc, sum, op.getDelta(), ValueRange{h});
  });
}

void lower(IndexLoadOp op) {
  LoopEmitter e(op);
  auto vecType = op.getResult().getType();
  int64_t block = vecType.getNumElements();
  // Lanes past K (or the token's length) are never read: a masked load
  // under min(K - offset, B).
  Value topk = op.getLength() ? op.getLength() : e.dim(op.getIndices(), 2);
  Value left = arith::SubIOp::create(e.b, e.loc, topk, op.getOffset());
  Value lanes = arith::MinSIOp::create(e.b, e.loc, left, e.index(block));
  auto maskType = VectorType::get({block}, e.b.getI1Type());
  Value inBounds = vector::CreateMaskOp::create(e.b, e.loc, maskType, lanes);
  Value pad = arith::ConstantOp::create(
      e.b, e.loc, DenseElementsAttr::get(vecType, e.b.getI32IntegerAttr(-1)));
  Value loaded = vector::MaskedLoadOp::create(
      e.b, e.loc, vecType, op.getIndices(),
      ValueRange{op.getToken(), op.getGroup(), op.getOffset()}, inBounds, pad);
  op.getResult().replaceAllUsesWith(loaded);
}

void lower(IndexMaskOp op) {
  LoopEmitter e(op);
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t block = op.getIndices().getType().getNumElements();
  auto idxVec = VectorType::get({block}, b.getIndexType());
  auto splat = [&](Value v) -> Value {
    return vector::BroadcastOp::create(b, loc, idxVec, v);
  };
  Value idx = arith::IndexCastOp::create(b, loc, idxVec, op.getIndices());
  Value lane = vector::StepOp::create(b, loc, idxVec);
  Value geZero = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, idx,
                                       splat(e.index(0)));
  Value ltBound = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, idx,
                                        splat(op.getBound()));
  Value inLane = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, lane,
                                       splat(op.getLanes()));
  Value valid = arith::AndIOp::create(b, loc, geZero, ltBound);
  valid = arith::AndIOp::create(b, loc, valid, inLane);
  if (Value limit = op.getLimit()) {
    Value lim = arith::IndexCastOp::create(b, loc, b.getIndexType(), limit);
    Value causal = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, idx,
                                         splat(lim));
    valid = arith::AndIOp::create(b, loc, valid, causal);
  }
  if (Value counters = op.getCounters()) {
    Value ones = arith::ConstantOp::create(
        b, loc,
        DenseElementsAttr::get(cast<ShapedType>(valid.getType()),
                               b.getBoolAttr(true)));
    Value invalid = arith::XOrIOp::create(b, loc, valid, ones);
    addCount(b, loc, counters, kInvalidSlots,
             arith::AndIOp::create(b, loc, invalid, inLane));
  }
  op.getMask().replaceAllUsesWith(valid);
}

void lower(IndexPairOp op) {
  LoopEmitter e(op);
  Value first = op.getFirstMask();
  Value indices = arith::SelectOp::create(e.b, e.loc, first, op.getFirst(),
                                          op.getSecond());
  Value mask = arith::OrIOp::create(e.b, e.loc, first, op.getSecondMask());
  auto maskType = cast<VectorType>(first.getType());
  Value ones = arith::ConstantOp::create(
      e.b, e.loc, DenseElementsAttr::get(maskType, e.b.getBoolAttr(true)));
  Value same = arith::CmpIOp::create(e.b, e.loc, arith::CmpIPredicate::eq,
                                     op.getFirst(), op.getSecond());
  Value keeps = arith::AndIOp::create(
      e.b, e.loc, op.getSecondMask(),
      arith::OrIOp::create(e.b, e.loc,
                           arith::XOrIOp::create(e.b, e.loc, first, ones),
                           same));
  op.getIndices().replaceAllUsesWith(indices);
  op.getMask().replaceAllUsesWith(mask);
  op.getSecondKeeps().replaceAllUsesWith(keeps);
}

void lower(RowLiveOp op) {
  LoopEmitter e(op);
  auto liveType = op.getLive().getType();
  int64_t hg = liveType.getNumElements();
  auto f32Vec = VectorType::get({hg}, e.b.getF32Type());
  Value head0 = headOf(e.b, e.loc, op.getHeadBlock(), hg, e.index(0));
  Value lse = vector::LoadOp::create(e.b, e.loc, f32Vec, op.getLse(),
                                     ValueRange{op.getToken(), head0});
  Value mag = math::AbsFOp::create(e.b, e.loc, lse);
  Value inf = arith::ConstantOp::create(
      e.b, e.loc,
      DenseElementsAttr::get(f32Vec, e.b.getF32FloatAttr(INFINITY)));
  // Ordered compare: false for +-inf and for NaN.
  Value live =
      arith::CmpFOp::create(e.b, e.loc, arith::CmpFPredicate::OLT, mag, inf);
  if (Value counters = op.getCounters()) {
    Value ones = arith::ConstantOp::create(
        e.b, e.loc,
        DenseElementsAttr::get(cast<ShapedType>(live.getType()),
                               e.b.getBoolAttr(true)));
    addCount(e.b, e.loc, counters, kDeadRows,
             arith::XOrIOp::create(e.b, e.loc, live, ones));
  }
  op.getLive().replaceAllUsesWith(live);
}

void lower(GatherOp op) {
  // Sequential code completes a gather where it is issued: the wait half
  // of a split gather has nothing left to do.
  if (op.getWaitOnly())
    return;
  LoopEmitter e(op);
  int64_t block = op.getTile().getType().getDimSize(0);
  Value width = e.index(op.getKv().getType().getDimSize(2));
  e.loop(e.index(block), [&](OpBuilder &b, Value j) {
    Value valid = op.getMask()
                      ? extractLane(b, e.loc, op.getMask(), j)
                      : arith::ConstantOp::create(b, e.loc, b.getBoolAttr(true))
                            .getResult();
    scf::IfOp::create(
        b, e.loc, valid,
        [&](OpBuilder &b, Location loc) {
          // Only a valid lane's index becomes an address.
          Value raw = extractLane(b, loc, op.getIndices(), j);
          Value row = arith::IndexCastOp::create(b, loc, b.getIndexType(), raw);
          LoopEmitter::loop(b, loc, width, [&](OpBuilder &b, Value c) {
            Value v = memref::LoadOp::create(b, loc, op.getKv(),
                                             ValueRange{row, op.getGroup(), c});
            if (v.getType() != op.getTile().getType().getElementType())
              v = arith::ExtFOp::create(b, loc, b.getF32Type(), v);
            memref::StoreOp::create(b, loc, v, op.getTile(), ValueRange{j, c});
          });
          scf::YieldOp::create(b, loc);
        },
        [&](OpBuilder &b, Location loc) {
          Type elem = op.getTile().getType().getElementType();
          Value zero =
              arith::ConstantOp::create(b, loc, b.getFloatAttr(elem, 0.0));
          LoopEmitter::loop(b, loc, width, [&](OpBuilder &b, Value c) {
            memref::StoreOp::create(b, loc, zero, op.getTile(),
                                    ValueRange{j, c});
          });
          scf::YieldOp::create(b, loc);
        });
  });
}

void lower(TileDotOp op) {
  LoopEmitter e(op);
  auto type = op.getResult().getType();
  int64_t hg = type.getDimSize(0), block = type.getDimSize(1);
  Value width = e.index(op.getLhs().getType().getDimSize(2));
  e.loop(e.index(hg), [&](OpBuilder &b, Value h) {
    Value head = headOf(b, e.loc, op.getHeadBlock(), hg, h);
    LoopEmitter::loop(b, e.loc, e.index(block), [&](OpBuilder &b, Value j) {
      Value zero = arith::ConstantOp::create(b, e.loc, b.getF32FloatAttr(0));
      Value sum = LoopEmitter::reduce(
          b, e.loc, width, zero, [&](OpBuilder &b, Value c, Value acc) {
            Value a = loadF32(b, e.loc, op.getLhs(), {op.getToken(), head, c});
            Value k = loadF32(b, e.loc, op.getTile(), {j, c});
            return arith::AddFOp::create(b, e.loc, acc,
                                         arith::MulFOp::create(b, e.loc, a, k));
          });
      memref::StoreOp::create(b, e.loc, sum, op.getResult(), ValueRange{h, j});
    });
  });
}

void lower(SoftmaxOp op) {
  LoopEmitter e(op);
  auto type = op.getScores().getType();
  int64_t hg = type.getDimSize(0), block = type.getDimSize(1);
  const double log2e = 1.4426950408889634;
  double scale = op.getScale().convertToDouble();
  bool natural = op.getBase() == LseBase::BaseE;
  std::optional<double> clamp;
  if (auto c = op.getClamp())
    clamp = c->convertToDouble();
  Type i64 = e.b.getI64Type();
  Value zeroCount =
      arith::ConstantOp::create(e.b, e.loc, e.b.getI64IntegerAttr(0));

  Value clamped = LoopEmitter::reduce(
      e.b, e.loc, e.index(hg), zeroCount,
      [&](OpBuilder &b, Value h, Value rowCount) {
        Location loc = e.loc;
        Value head = headOf(b, loc, op.getHeadBlock(), hg, h);
        Value lse = memref::LoadOp::create(b, loc, op.getLse(),
                                           ValueRange{op.getToken(), head});
        if (natural)
          lse = arith::MulFOp::create(
              b, loc, lse,
              arith::ConstantOp::create(b, loc, b.getF32FloatAttr(log2e)));
        Value live =
            op.getLive() ? extractLane(b, loc, op.getLive(), h) : Value();
        // A step of two tokens: the second half of the rows uses the second
        // token's mask.
        Value rowMask = op.getMask();
        if (Value pair = op.getPairMask()) {
          Value second = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                               h, e.index(hg / 2));
          rowMask = arith::SelectOp::create(b, loc, second, pair, rowMask);
        }
        return LoopEmitter::reduce(
            b, loc, e.index(block), rowCount,
            [&](OpBuilder &b, Value j, Value count) -> Value {
              Value s = memref::LoadOp::create(b, loc, op.getScores(),
                                               ValueRange{h, j});
              Value k = arith::ConstantOp::create(
                  b, loc, b.getF32FloatAttr(scale * log2e));
              Value x2 = arith::SubFOp::create(
                  b, loc, arith::MulFOp::create(b, loc, s, k), lse);
              Value p;
              if (!clamp) {
                // Unguarded form; smla-verify-guards refuses it.
                p = math::Exp2Op::create(b, loc, x2);
              } else {
                Value bound = arith::ConstantOp::create(
                    b, loc, b.getF32FloatAttr(*clamp));
                Value xc = arith::MinimumFOp::create(b, loc, x2, bound);
                Value ex = math::Exp2Op::create(b, loc, xc);
                Value ok = extractLane(b, loc, rowMask, j);
                ok = arith::AndIOp::create(b, loc, ok, live);
                Value zero =
                    arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
                p = arith::SelectOp::create(b, loc, ok, ex, zero);
                Value over = arith::CmpFOp::create(
                    b, loc, arith::CmpFPredicate::OGT, x2, bound);
                Value fired = arith::AndIOp::create(b, loc, ok, over);
                count = arith::AddIOp::create(
                    b, loc, count, arith::ExtUIOp::create(b, loc, i64, fired));
              }
              memref::StoreOp::create(b, loc, p, op.getProbs(),
                                      ValueRange{h, j});
              return count;
            });
      });
  if (Value counters = op.getCounters()) {
    Value idx = e.index(kClamped);
    Value old = memref::LoadOp::create(e.b, e.loc, counters, ValueRange{idx});
    Value sum = arith::AddIOp::create(e.b, e.loc, old, clamped);
    memref::StoreOp::create(e.b, e.loc, sum, counters, ValueRange{idx});
  }
}

void lower(DScoresOp op) {
  LoopEmitter e(op);
  auto type = op.getProbs().getType();
  Value scale = e.f32(op.getScale().convertToDouble());
  Value zero = e.f32(0.0);
  e.loop(e.index(type.getDimSize(0)), [&](OpBuilder &b, Value h) {
    Value delta =
        memref::LoadOp::create(b, e.loc, op.getDelta(), ValueRange{h});
    LoopEmitter::loop(
        b, e.loc, e.index(type.getDimSize(1)), [&](OpBuilder &b, Value j) {
          Location loc = e.loc;
          Value p =
              memref::LoadOp::create(b, loc, op.getProbs(), ValueRange{h, j});
          Value dp =
              memref::LoadOp::create(b, loc, op.getDp(), ValueRange{h, j});
          Value diff = arith::SubFOp::create(b, loc, dp, delta);
          Value ds = arith::MulFOp::create(
              b, loc, arith::MulFOp::create(b, loc, p, diff), scale);
          // P == 0 (masked, dead or underflowed) gives exactly 0.
          Value nonzero =
              arith::CmpFOp::create(b, loc, arith::CmpFPredicate::ONE, p, zero);
          ds = arith::SelectOp::create(b, loc, nonzero, ds, zero);
          memref::StoreOp::create(b, loc, ds, op.getDs(), ValueRange{h, j});
        });
  });
}

void lower(DqAccumulateOp op) {
  LoopEmitter e(op);
  auto accType = op.getAcc().getType();
  Value block = e.index(op.getDs().getType().getDimSize(1));
  e.loop(e.index(accType.getDimSize(0)), [&](OpBuilder &b, Value h) {
    LoopEmitter::loop(
        b, e.loc, e.index(accType.getDimSize(1)), [&](OpBuilder &b, Value c) {
          Value init =
              memref::LoadOp::create(b, e.loc, op.getAcc(), ValueRange{h, c});
          Value sum = LoopEmitter::reduce(
              b, e.loc, block, init, [&](OpBuilder &b, Value j, Value acc) {
                Value ds = memref::LoadOp::create(b, e.loc, op.getDs(),
                                                  ValueRange{h, j});
                Value k = loadF32(b, e.loc, op.getTile(), {j, c});
                return arith::AddFOp::create(
                    b, e.loc, acc, arith::MulFOp::create(b, e.loc, ds, k));
              });
          memref::StoreOp::create(b, e.loc, sum, op.getAcc(), ValueRange{h, c});
        });
  });
}

/// dkv[row, g, c] += sum_h coef[h, j] * rows[t, g*Hg + h, c] for c in [0, n).
void scatterColumns(OpBuilder &b, Location loc, ScatterDkvOp op, Value coef,
                    Value rows, Value row, Value j, int64_t width) {
  int64_t hg = op.getDs().getType().getDimSize(0);
  Value heads = arith::ConstantIndexOp::create(b, loc, hg);
  Value n = arith::ConstantIndexOp::create(b, loc, width);
  LoopEmitter::loop(b, loc, n, [&](OpBuilder &b, Value c) {
    Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
    Value sum = LoopEmitter::reduce(
        b, loc, heads, zero, [&](OpBuilder &b, Value h, Value acc) {
          Value head = headOf(b, loc, op.getHeadBlock(), hg, h);
          Value w = memref::LoadOp::create(b, loc, coef, ValueRange{h, j});
          Value x = loadF32(b, loc, rows, {op.getToken(), head, c});
          return arith::AddFOp::create(b, loc, acc,
                                       arith::MulFOp::create(b, loc, w, x));
        });
    ValueRange at{row, op.getGroup(), c};
    Value old = memref::LoadOp::create(b, loc, op.getDkv(), at);
    memref::StoreOp::create(b, loc, arith::AddFOp::create(b, loc, old, sum),
                            op.getDkv(), at);
  });
}

void lower(ScatterDkvOp op) {
  LoopEmitter e(op);
  int64_t block = op.getDs().getType().getDimSize(1);
  int64_t width = op.getQ().getType().getDimSize(2);
  int64_t d = op.getDout().getType().getDimSize(2);
  e.loop(e.index(block), [&](OpBuilder &b, Value j) {
    Value valid = op.getMask()
                      ? extractLane(b, e.loc, op.getMask(), j)
                      : arith::ConstantOp::create(b, e.loc, b.getBoolAttr(true))
                            .getResult();
    // A masked lane writes nothing: its index never becomes an address.
    scf::IfOp::create(b, e.loc, valid, [&](OpBuilder &b, Location loc) {
      Value raw = extractLane(b, loc, op.getIndices(), j);
      Value row = arith::IndexCastOp::create(b, loc, b.getIndexType(), raw);
      scatterColumns(b, loc, op, op.getDs(), op.getQ(), row, j, width);
      scatterColumns(b, loc, op, op.getProbs(), op.getDout(), row, j, d);
      scf::YieldOp::create(b, loc);
    });
  });
}

/// Stores `row` values through `store` (which rounds and returns the stored
/// value); with `counters`, counters[kNonFiniteRows] += 1 when any stored
/// value is a NaN or an Inf.
void storeRow(OpBuilder &b, Location loc, Value width, Value counters,
              function_ref<Value(OpBuilder &, Value)> store) {
  if (!counters) {
    LoopEmitter::loop(b, loc, width,
                      [&](OpBuilder &b, Value c) { (void)store(b, c); });
    return;
  }
  Value no = arith::ConstantOp::create(b, loc, b.getBoolAttr(false));
  Value inf = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(INFINITY));
  Value bad = LoopEmitter::reduce(
      b, loc, width, no, [&](OpBuilder &b, Value c, Value acc) {
        Value v = store(b, c);
        if (!v.getType().isF32())
          v = arith::ExtFOp::create(b, loc, b.getF32Type(), v);
        // Ordered compare: false for +-inf and for NaN.
        Value finite = arith::CmpFOp::create(
            b, loc, arith::CmpFPredicate::OLT, math::AbsFOp::create(b, loc, v),
            inf);
        Value notFinite = arith::XOrIOp::create(
            b, loc, finite,
            arith::ConstantOp::create(b, loc, b.getBoolAttr(true)));
        return arith::OrIOp::create(b, loc, acc, notFinite).getResult();
      });
  Value idx = arith::ConstantIndexOp::create(b, loc, kNonFiniteRows);
  Value old = memref::LoadOp::create(b, loc, counters, ValueRange{idx});
  Value sum = arith::AddIOp::create(
      b, loc, old, arith::ExtUIOp::create(b, loc, b.getI64Type(), bad));
  memref::StoreOp::create(b, loc, sum, counters, ValueRange{idx});
}

void lower(StoreDqOp op) {
  LoopEmitter e(op);
  auto type = op.getAcc().getType();
  int64_t hg = type.getDimSize(0);
  Value width = e.index(type.getDimSize(1));
  e.loop(e.index(hg), [&](OpBuilder &b, Value h) {
    Value head = headOf(b, e.loc, op.getHeadBlock(), hg, h);
    storeRow(b, e.loc, width, op.getCounters(),
             [&](OpBuilder &b, Value c) -> Value {
               Value v = memref::LoadOp::create(b, e.loc, op.getAcc(),
                                                ValueRange{h, c});
               return storeRounded(b, e.loc, v, op.getDq(),
                                   {op.getToken(), head, c});
             });
  });
}

void lower(CastDkvOp op) {
  LoopEmitter e(op);
  Value rows = e.dim(op.getAccum(), 0), groups = e.dim(op.getAccum(), 1);
  Value width = e.dim(op.getAccum(), 2);
  e.loop(rows, [&](OpBuilder &b, Value s) {
    LoopEmitter::loop(b, e.loc, groups, [&](OpBuilder &b, Value g) {
      storeRow(b, e.loc, width, op.getCounters(),
               [&](OpBuilder &b, Value c) -> Value {
                 Value v = memref::LoadOp::create(b, e.loc, op.getAccum(),
                                                  ValueRange{s, g, c});
                 // Without dkv the f32 result is the accumulator itself.
                 if (!op.getDkv())
                   return v;
                 return storeRounded(b, e.loc, v, op.getDkv(), {s, g, c});
               });
    });
  });
}
} // namespace

LogicalResult mlir::smla::lowerTileOpToLoops(Operation *op) {
  if (isa<SparseAttentionBwdOp>(op))
    return op->emitOpError()
           << "must be decomposed (smla-decompose) before lowering to loops";
  bool lowered =
      llvm::TypeSwitch<Operation *, bool>(op)
          .Case<DeltaOp, IndexLoadOp, IndexMaskOp, IndexPairOp, RowLiveOp,
                GatherOp,
                TileDotOp, SoftmaxOp, DScoresOp, DqAccumulateOp, ScatterDkvOp,
                StoreDqOp, CastDkvOp>([](auto typed) {
            lower(typed);
            return true;
          })
          .Default([](Operation *) { return false; });
  if (!lowered)
    return op->emitOpError() << "has no loop lowering";
  op->erase();
  return success();
}

namespace {
struct SMLALowerToLoopsPass
    : public mlir::smla::impl::SMLALowerToLoopsBase<SMLALowerToLoopsPass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation()->walk([&](Operation *op) {
      if (isa<SMLADialect>(op->getDialect()))
        ops.push_back(op);
    });
    // Producers (index loads, masks, live rows) come before their users in
    // program order, and each lowering replaces all uses of its results, so
    // lowering in walk order leaves no dangling use.
    for (Operation *op : ops)
      if (failed(lowerTileOpToLoops(op)))
        return signalPassFailure();
  }
};
} // namespace
