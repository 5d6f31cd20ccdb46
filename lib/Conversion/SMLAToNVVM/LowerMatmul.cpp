//===- LowerMatmul.cpp - tile_dot and dq_accumulate on a CTA --------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// The two block products whose operands are already in shared memory or
// cached global memory: scores/dP (heads x slots, reduced over the row
// width) and the dQ update (heads x width, reduced over the slots). Both
// are bf16 x bf16 accumulated in f32. The CUDA-core forms below are the
// reference lowering; LowerMma.cpp (tile_dot) and LowerDqMma.cpp
// (dq_accumulate) hold the tensor-core forms.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

using namespace mlir;
using namespace mlir::smla;

namespace mlir::smla {
void lowerTileDotMma(CtaEmitter &e, TileDotOp op);
void lowerDqAccumulateMma(CtaEmitter &e, DqAccumulateOp op, Value regs,
                          int64_t slots);
bool canUseMma(TileDotOp op);
bool canUseMma(DqAccumulateOp op);
} // namespace mlir::smla

void mlir::smla::lowerTileDot(CtaEmitter &e, TileDotOp op, bool mma) {
  if (mma && canUseMma(op)) {
    lowerTileDotMma(e, op);
    return;
  }
  auto type = op.getResult().getType();
  int64_t hg = type.getDimSize(0), block = type.getDimSize(1);
  int64_t width = op.getLhs().getType().getDimSize(2);
  e.ctaLoop(hg * block, [&](OpBuilder &b, Value q) {
    Location loc = e.loc;
    auto [h, j] = splitRow(b, loc, q, block);
    Value head = headIndex(b, loc, op.getHeadBlock(), hg, h);
    auto v8 = VectorType::get({8}, b.getF32Type());
    Value zeros = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(v8, b.getF32FloatAttr(0)));
    Value sum =
        emitReduce(b, loc, arith::ConstantIndexOp::create(b, loc, 0),
                   arith::ConstantIndexOp::create(b, loc, width),
                   arith::ConstantIndexOp::create(b, loc, 8), zeros,
                   [&](OpBuilder &b, Value c, Value acc) {
                     Value a = loadVecF32(b, loc, op.getLhs(),
                                          {op.getToken(), head, c}, 8);
                     Value k = loadVecF32(b, loc, op.getTile(), {j, c}, 8);
                     return vector::FMAOp::create(b, loc, a, k, acc);
                   });
    Value total =
        vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, sum);
    memref::StoreOp::create(b, loc, total, op.getResult(), ValueRange{h, j});
  });
}

void mlir::smla::lowerDqAccumulate(CtaEmitter &e, DqAccumulateOp op, bool mma,
                                    Value regs, int64_t slots) {
  if (mma && canUseMma(op)) {
    lowerDqAccumulateMma(e, op, regs, slots);
    return;
  }
  auto accType = op.getAcc().getType();
  int64_t hg = accType.getDimSize(0), width = accType.getDimSize(1);
  int64_t block = op.getDs().getType().getDimSize(1);
  e.ctaLoop(hg * (width / 4), [&](OpBuilder &b, Value q) {
    Location loc = e.loc;
    auto [h, c] = splitQuad(b, loc, q, width);
    auto v4 = VectorType::get({4}, b.getF32Type());
    Value init =
        vector::LoadOp::create(b, loc, v4, op.getAcc(), ValueRange{h, c});
    Value sum =
        emitReduce(b, loc, arith::ConstantIndexOp::create(b, loc, 0),
                   arith::ConstantIndexOp::create(b, loc, block),
                   arith::ConstantIndexOp::create(b, loc, 1), init,
                   [&](OpBuilder &b, Value j, Value acc) {
                     Value w = memref::LoadOp::create(b, loc, op.getDs(),
                                                      ValueRange{h, j});
                     Value k = loadVecF32(b, loc, op.getTile(), {j, c}, 4);
                     Value wv = vector::BroadcastOp::create(b, loc, v4, w);
                     return vector::FMAOp::create(b, loc, wv, k, acc);
                   });
    vector::StoreOp::create(b, loc, sum, op.getAcc(), ValueRange{h, c});
  });
}
