//===- LowerDelta.cpp - smla.delta to CTA-cooperative code ----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Delta = rowsum(o * dout) of one head block, by lane groups and shuffles,
// or the caller's Delta where the op has `given` and its pointer is not
// null; used by smla-lower-to-nvvm and, in the softmax role, by
// smla-gpu-to-nvvm.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

using namespace mlir;
using namespace mlir::smla;

/// delta[h] = sum_c o[t, head, c] dout[t, head, c], row h on a group
/// of `parts` consecutive lanes (a power of two up to 16 that divides
/// D / 8). Lane p of the group loads columns (k parts + p) 8 .. +7 for
/// every k at once (a warp's k-th loads cover 256 contiguous bytes of a
/// row), and a butterfly of shfl.xor adds the group's partial sums.
/// Lanes past the last row (up to a multiple of 32) load nothing and
/// add zeros, so that every lane of a warp takes part in the shuffles.
/// One thread per row summing D serially left the prologue's other
/// warps waiting at its barrier for ~4% of B1's step time.
static void computeDelta(CtaEmitter &e, DeltaOp op) {
  int64_t hg = op.getDelta().getType().getDimSize(0);
  int64_t d = op.getO().getType().getDimSize(2);
  int64_t parts = 1;
  while (parts < 16 && (d / 8) % (parts * 2) == 0)
    parts *= 2;
  int64_t perLane = d / 8 / parts, unroll = 4;
  while (perLane % unroll)
    --unroll;
  int64_t items = llvm::alignTo(hg * parts, 32);
  e.ctaLoop(items, [&](OpBuilder &b, Value item) {
    Location loc = e.loc;
    auto v8 = VectorType::get({8}, b.getF32Type());
    auto [h, part] = splitRow(b, loc, item, parts);
    Value live =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, h,
                              arith::ConstantIndexOp::create(b, loc, hg));
    auto partial = scf::IfOp::create(
        b, loc, live,
        [&](OpBuilder &b, Location loc) {
          Value head = headIndex(b, loc, op.getHeadBlock(), hg, h);
          Value zeros = arith::ConstantOp::create(
              b, loc, DenseElementsAttr::get(v8, b.getF32FloatAttr(0)));
          // `unroll` loads of each tensor in flight per round.
          auto round = [&](OpBuilder &b, Value first, Value acc) {
            for (int64_t k = 0; k < unroll; ++k) {
              Value c = arith::MulIOp::create(
                  b, loc,
                  arith::AddIOp::create(
                      b, loc, first,
                      arith::ConstantIndexOp::create(b, loc, k * parts)),
                  arith::ConstantIndexOp::create(b, loc, 8));
              Value o =
                  loadVecF32(b, loc, op.getO(), {op.getToken(), head, c}, 8);
              Value g = loadVecF32(b, loc, op.getDout(),
                                   {op.getToken(), head, c}, 8);
              acc = vector::FMAOp::create(b, loc, o, g, acc);
            }
            return acc;
          };
          Value acc =
              perLane == unroll
                  ? round(b, part, zeros)
                  : emitReduce(b, loc, part,
                               arith::ConstantIndexOp::create(b, loc, d / 8),
                               arith::ConstantIndexOp::create(b, loc,
                                                              unroll * parts),
                               zeros, round);
          scf::YieldOp::create(b, loc,
                               vector::ReductionOp::create(
                                   b, loc, vector::CombiningKind::ADD, acc)
                                   .getResult());
        },
        [&](OpBuilder &b, Location loc) {
          scf::YieldOp::create(
              b, loc,
              arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0))
                  .getResult());
        });
    Value sum = partial.getResult(0);
    for (int64_t off = parts / 2; off >= 1; off /= 2) {
      Value other =
          gpu::ShuffleOp::create(b, loc, sum, i32c(b, loc, off),
                                 i32c(b, loc, 32), gpu::ShuffleMode::XOR)
              .getShuffleResult();
      sum = arith::AddFOp::create(b, loc, sum, other);
    }
    Value first =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, part,
                              arith::ConstantIndexOp::create(b, loc, 0));
    scf::IfOp::create(b, loc, arith::AndIOp::create(b, loc, live, first),
                      [&](OpBuilder &b, Location loc) {
                        memref::StoreOp::create(b, loc, sum, op.getDelta(),
                                                ValueRange{h});
                        scf::YieldOp::create(b, loc);
                      });
  });
}

/// delta[h] = given[t, head h], one thread per row.
static void copyGivenDelta(CtaEmitter &e, DeltaOp op) {
  int64_t hg = op.getDelta().getType().getDimSize(0);
  e.ctaLoop(hg, [&](OpBuilder &b, Value h) {
    Value head = headIndex(b, e.loc, op.getHeadBlock(), hg, h);
    Value v = memref::LoadOp::create(b, e.loc, op.getGiven(),
                                     ValueRange{op.getToken(), head});
    memref::StoreOp::create(b, e.loc, v, op.getDelta(), ValueRange{h});
  });
}

LogicalResult mlir::smla::lowerDelta(CtaEmitter &e, DeltaOp op) {
  if (op.getO().getType().getDimSize(2) % 8)
    return op.emitOpError() << "GPU delta needs D to be a multiple of 8";
  if (!op.getGiven()) {
    computeDelta(e, op);
    return success();
  }
  // A null `given` pointer: the caller passed no Delta.
  OpBuilder &b = e.b;
  Value ptr =
      memref::ExtractAlignedPointerAsIndexOp::create(b, e.loc, op.getGiven());
  Value none = arith::CmpIOp::create(b, e.loc, arith::CmpIPredicate::eq, ptr,
                                     e.index(0));
  auto branch = scf::IfOp::create(b, e.loc, none, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(branch.thenBlock());
  computeDelta(e, op);
  b.setInsertionPointToStart(branch.elseBlock());
  copyGivenDelta(e, op);
  return success();
}
