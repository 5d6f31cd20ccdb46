//===- LowerWgmma.cpp - warpgroup products on swizzled tiles --------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// smla_gpu.wgmma as wgmma.fence, one wgmma.mma_async m64nNk16 per 16 of
// k, wgmma.commit_group. Operands in shared memory are read through
// descriptors of the 128-byte swizzle (Wgmma.h says which LBO / SBO each
// major takes, as checked on the H200):
//
//   k-major (rows = M or N, k along the columns): the start is the row's
//   place in the slab of column k0 plus 2 (k0 % 64) bytes; SBO = 1024
//   (8 rows of 128 bytes), LBO unused;
//   mn-major (rows = k, M or N along the columns): the start is row k0 of
//   the slab of the first column; LBO = the slab stride (R x 128 bytes:
//   the next 64 columns), SBO = 1024 (8 k rows).
//
// wgmma_wait is the wait plus an empty asm that takes every fragment
// register as a tied operand: LLVM cannot move a read of an accumulator
// above it.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAGPUToNVVM/SMLAGPUToNVVM.h"
#include "smla/Conversion/SMLAToNVVM/Wgmma.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;
namespace sg = mlir::smla_gpu;

namespace {
constexpr int64_t kSwizzleAtom = 1024; // 8 rows of 128 bytes

/// The descriptor of the 16-column (k16) step at `k0` of an operand that
/// starts at (`row`, `col`) of a tile of `rows` rows whose shared address
/// is `base`.
Value stepDescriptor(Mma &m, Value base, int64_t rows, bool kMajor,
                     int64_t row, int64_t col, int64_t k0) {
  int64_t slabBytes = rows * sg::kSlabColumns * 2;
  int64_t offset;
  if (kMajor) {
    int64_t c = col + k0;
    offset = (c / sg::kSlabColumns) * slabBytes + row * 128 +
             (c % sg::kSlabColumns) * 2;
  } else {
    offset = (col / sg::kSlabColumns) * slabBytes + (row + k0) * 128;
  }
  Value addr = m.add(base, offset);
  return wgmma::descriptor(m, addr, kMajor ? 16 : slabBytes, kSwizzleAtom,
                           /*swizzle128=*/true);
}

struct LowerWgmma : OpRewritePattern<sg::WgmmaOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::WgmmaOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Mma m{rw, loc};
    int64_t n = op.getN(), k = op.getKExtent();
    bool aK = op.getAMajor() == "k", bK = op.getBMajor() == "k";
    // Opaque bases: LLVM cannot hoist the descriptors out of the loops
    // around the product (they would stay live across them).
    auto base = [&](Value tile) { return wgmma::launder(m, m.base(tile)); };
    Value aBase = op.getATile() ? base(op.getATile()) : Value();
    Value bBase = base(op.getBTile());
    int64_t aRows = op.getATile() ? op.getATile().getType().getDimSize(0) : 0;
    int64_t bRows = op.getBTile().getType().getDimSize(0);
    SmallVector<Value> aRegs;
    if (op.getARegs())
      for (int64_t i = 0; i < op.getARegs().getType().getNumElements(); ++i)
        aRegs.push_back(vector::ExtractOp::create(rw, loc, op.getARegs(), i));
    SmallVector<Value> acc;
    if (op.getAcc())
      for (int64_t i = 0; i < n / 2; ++i)
        acc.push_back(vector::ExtractOp::create(rw, loc, op.getAcc(), i));
    wgmma::fence(rw, loc);
    for (int64_t k0 = 0; k0 < k; k0 += 16) {
      Value descA;
      ArrayRef<Value> regs;
      if (aBase)
        descA = stepDescriptor(m, aBase, aRows, aK, op.getARow(),
                               op.getACol(), k0);
      else
        regs = ArrayRef<Value>(aRegs).slice(4 * (k0 / 16), 4);
      Value descB = stepDescriptor(m, bBase, bRows, bK, op.getBRow(),
                                   op.getBCol(), k0);
      acc = wgmma::mmaAsync(m, n, regs, descA, descB, /*transB=*/!bK, acc,
                            /*transA=*/aBase && !aK);
    }
    wgmma::commit(rw, loc);
    rw.replaceOp(op, vector::FromElementsOp::create(rw, loc, op.getType(),
                                                    acc));
    return success();
  }
};

struct LowerWgmmaWait : OpRewritePattern<sg::WgmmaWaitOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::WgmmaWaitOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    wgmma::wait(rw, loc, op.getPending());
    SmallVector<Value> results;
    for (Value frag : op.getFragments()) {
      auto type = cast<VectorType>(frag.getType());
      int64_t n = type.getNumElements();
      SmallVector<Value> elems;
      std::string constraints;
      for (int64_t i = 0; i < n; ++i) {
        elems.push_back(vector::ExtractOp::create(rw, loc, frag, i));
        constraints += "=f,";
      }
      for (int64_t i = 0; i < n; ++i)
        constraints += std::to_string(i) + (i + 1 < n ? "," : "");
      auto structTy = LLVM::LLVMStructType::getLiteral(
          rw.getContext(), SmallVector<Type>(n, rw.getF32Type()));
      auto asmOp =
          wgmma::inlineAsm(rw, loc, structTy, elems, "", constraints);
      SmallVector<Value> tied;
      for (int64_t i = 0; i < n; ++i)
        tied.push_back(
            LLVM::ExtractValueOp::create(rw, loc, asmOp.getResult(0), i));
      results.push_back(vector::FromElementsOp::create(rw, loc, type, tied));
    }
    rw.replaceOp(op, results);
    return success();
  }
};

/// Columns 16 s .. 16 s + 15 of the fragment are the A registers of k-step
/// s: (r0, 2q..) (r1, 2q..) (r0, 8 + 2q..) (r1, 8 + 2q..), i.e. element
/// pairs 8 s + {0, 2, 4, 6}.
struct LowerPackOperand : OpRewritePattern<sg::PackOperandOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::PackOperandOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Mma m{rw, loc};
    int64_t n = op.getSource().getType().getNumElements();
    auto v2 = VectorType::get({2}, rw.getF32Type());
    SmallVector<Value> regs;
    for (int64_t i = 0; i < n; i += 2) {
      Value x = vector::ExtractOp::create(rw, loc, op.getSource(), i);
      Value y = vector::ExtractOp::create(rw, loc, op.getSource(), i + 1);
      regs.push_back(m.packBf16(
          vector::FromElementsOp::create(rw, loc, v2, ValueRange{x, y})));
    }
    rw.replaceOp(op,
                 vector::FromElementsOp::create(rw, loc, op.getType(), regs));
    return success();
  }
};
} // namespace

void mlir::smla::populateWgmmaPatterns(RewritePatternSet &patterns) {
  patterns.add<LowerWgmma, LowerWgmmaWait, LowerPackOperand>(
      patterns.getContext());
}
