//===- BlockWalk.cpp - the order a CTA walks its top-k blocks -------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// A CTA walks the blocks of its top-k slots in a rotated order: block
//
//   b = (j + j0) mod numBlocks,   j0 = (cta * numBlocks / P) mod numBlocks
//
// at step j, where cta = blockIdx.x + T * blockIdx.y (the order in which
// CTAs are dispatched) and P is the i32 kernel parameter `walk_period`
// (P <= 0: no rotation, j0 = 0). Every slot is still visited exactly once,
// and the masks and guards are per slot, so the result is the same sum in
// another order.
//
// Why: when the caller has sorted each row of indices (the "sorted walk",
// python/csrc/SparseMlaBwd.cpp), step j of a CTA touches the keys of one
// quantile of the key range. CTAs are dispatched in order as earlier ones
// finish, so with P close to (a small multiple of) the number of resident
// CTAs, the CTAs running at one moment sit at about the same rotated block
// and their dKV reductions hit a narrow, L2-resident band of dKV rows
// instead of all of it (docs/runtime.md, "The slot walk").
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/SMLAToNVVM.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;

namespace mlir::smla {

LogicalResult rotateBlockWalk(OpBuilder &b, scf::ForOp loop, Value cta,
                              Value period) {
  if (!matchPattern(loop.getLowerBound(), m_Zero()) ||
      !matchPattern(loop.getStep(), m_One()) || !period.getType().isInteger(32))
    return loop.emitOpError()
           << "cannot rotate the block walk: expected a loop from 0 in steps "
              "of 1 and an i32 period";
  OpBuilder::InsertionGuard guard(b);
  Location loc = loop.getLoc();
  Type index = b.getIndexType();
  auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
  Value n = loop.getUpperBound();
  // n = 0 runs no step; max(n, 1) keeps the division below defined.
  Value nSafe = arith::MaxUIOp::create(b, loc, n, c(1));
  Value on = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::sgt, period,
      arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)));
  Value p = arith::IndexCastOp::create(b, loc, index, period);
  Value pSafe = arith::SelectOp::create(b, loc, on, p, c(1));
  Value phase = arith::DivUIOp::create(
      b, loc, arith::MulIOp::create(b, loc, cta, nSafe), pSafe);
  Value j0 = arith::SelectOp::create(
      b, loc, on, arith::RemUIOp::create(b, loc, phase, nSafe), c(0));

  Value iv = loop.getInductionVar();
  b.setInsertionPointToStart(loop.getBody());
  // j + j0 < 2n: one conditional subtraction instead of a remainder.
  Value sum = arith::AddIOp::create(b, loc, iv, j0);
  Value wrap = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, sum, n);
  Value rotated = arith::SelectOp::create(
      b, loc, wrap, arith::SubIOp::create(b, loc, sum, n), sum);
  iv.replaceAllUsesExcept(rotated, sum.getDefiningOp());
  return success();
}

} // namespace mlir::smla
