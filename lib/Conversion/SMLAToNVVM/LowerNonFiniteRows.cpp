//===- LowerNonFiniteRows.cpp - the non-finite output row guard -----------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// The guard behind counters[3] (kNonFiniteRows): store_dq and cast_dkv count
// the rows of their results that hold a NaN or an Inf. Each thread flags the
// values it stored (a compare per value, in registers); one barrier with an
// OR reduction tells the CTA whether any thread flagged one. Only then (a
// finite input overflowed f32, or a kernel bug) does the CTA re-read its
// rows, one thread per row, and count each bad row once. Clean CTAs pay the
// compares and that barrier.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

#include <cmath>

using namespace mlir;
using namespace mlir::smla;

Value mlir::smla::isNonFinite(OpBuilder &b, Location loc, Value stored) {
  SmallVector<Value, 4> elems;
  if (auto vec = dyn_cast<VectorType>(stored.getType())) {
    for (int64_t i = 0; i < vec.getNumElements(); ++i)
      elems.push_back(vector::ExtractOp::create(b, loc, stored, i));
  } else {
    elems.push_back(stored);
  }
  Value inf = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(INFINITY));
  Value bad;
  for (Value x : elems) {
    if (!x.getType().isF32())
      x = arith::ExtFOp::create(b, loc, b.getF32Type(), x);
    // Ordered compare: false for +-inf and for NaN.
    Value finite =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT,
                              math::AbsFOp::create(b, loc, x), inf);
    Value notFinite = arith::XOrIOp::create(
        b, loc, finite,
        arith::ConstantOp::create(b, loc, b.getBoolAttr(true)));
    bad = bad ? arith::OrIOp::create(b, loc, bad, notFinite).getResult()
              : notFinite;
  }
  return bad;
}

NonFiniteFlag::NonFiniteFlag(OpBuilder &b, Location loc, Operation *op) {
  auto func = op->getParentOfType<gpu::GPUFuncOp>();
  OpBuilder entry = OpBuilder::atBlockBegin(&func.getBody().front());
  Value one = i32c(entry, loc, 1);
  slot = LLVM::AllocaOp::create(entry, loc,
                                LLVM::LLVMPointerType::get(b.getContext()),
                                b.getI32Type(), one, /*alignment=*/4);
  LLVM::StoreOp::create(b, loc, i32c(b, loc, 0), slot);
}

void NonFiniteFlag::add(OpBuilder &b, Location loc, Value stored) {
  Value bit = arith::ExtUIOp::create(b, loc, b.getI32Type(),
                                     isNonFinite(b, loc, stored));
  Value old = LLVM::LoadOp::create(b, loc, b.getI32Type(), slot);
  LLVM::StoreOp::create(b, loc, arith::OrIOp::create(b, loc, old, bit), slot);
}

Value NonFiniteFlag::get(OpBuilder &b, Location loc) {
  Value v = LLVM::LoadOp::create(b, loc, b.getI32Type(), slot);
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, v,
                               i32c(b, loc, 0));
}

void mlir::smla::emitNonFiniteRowCount(CtaEmitter &e, Value counters,
                                       Value flagged, int64_t rows,
                                       int64_t width, const RowLoadFn &load) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  // bar.red.or: every thread of the CTA arrives; the result is uniform.
  Value pred = arith::ExtUIOp::create(b, loc, b.getI32Type(), flagged);
  auto any = NVVM::BarrierOp::create(
      b, loc, TypeRange{b.getI32Type()}, /*barrierId=*/Value(),
      /*numberOfThreads=*/Value(),
      NVVM::BarrierReductionAttr::get(b.getContext(),
                                      NVVM::BarrierReduction::OR),
      pred);
  Value fired = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                      any.getRes(), i32c(b, loc, 0));
  scf::IfOp::create(b, loc, fired, [&](OpBuilder &nb, Location l) {
    CtaEmitter inner(nb, l, e.tid, e.threads);
    inner.ctaLoop(rows, [&](OpBuilder &rb, Value row) {
      Value no = arith::ConstantOp::create(rb, l, rb.getBoolAttr(false));
      Value c0 = arith::ConstantIndexOp::create(rb, l, 0);
      Value c1 = arith::ConstantIndexOp::create(rb, l, 1);
      Value n = arith::ConstantIndexOp::create(rb, l, width);
      Value bad = emitReduce(
          rb, l, c0, n, c1, no, [&](OpBuilder &cb, Value col, Value acc) {
            Value x = load(cb, l, row, col);
            return arith::OrIOp::create(cb, l, acc, isNonFinite(cb, l, x))
                .getResult();
          });
      emitCount(rb, l, counters, kNonFiniteRows, bad);
    });
    scf::YieldOp::create(nb, l);
  });
}
