//===- MmaBuilder.h - helpers of the mma.sync lowerings ----------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Shared by the tensor-core lowerings of smla-lower-to-nvvm (LowerMma.cpp:
// tile_dot; LowerDqMma.cpp: dq_accumulate, store_dq in registers;
// LowerScatterMma.cpp: scatter_dkv): index
// arithmetic, 32-bit shared/global loads, bf16 packing, nvvm.mma.sync
// m16n8k16 and the fragment layout.
//
// Fragment layout (PTX ISA, mma.m16n8k16 .bf16): with gr = lane / 4 and
// kq = 2 * (lane % 4), A regs are rows (gr, gr+8) x cols (kq, kq+8) as
// packed pairs, B regs are col gr x rows (kq, kq+8), C/D are rows
// (gr, gr+8) x cols (kq, kq+1).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATONVVM_MMABUILDER_H
#define SMLA_CONVERSION_SMLATONVVM_MMABUILDER_H

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

namespace mlir::smla::mma {

constexpr int64_t kMmaLanes = 32;

/// The two rows of an m16 tile that lane group `gr` (lane / 4) holds in
/// the A and C fragments: r0 = 16 mt + gr and r1 = r0 + 8. Rows >= the
/// tile's real row count are padding: ok0/ok1 are false, and s0/s1 (the
/// rows actually addressed) fall back to row 0, so no address past the
/// real rows is formed.
struct FragRows {
  Value r0, r1, ok0, ok1, s0, s1;
};

/// A thread's place in its warp: warp = tid / 32, lane = tid % 32, the
/// lane group gr = lane / 4 (fragment rows gr, gr + 8) and kq = 2 (lane % 4)
/// (fragment columns kq, kq + 1 and kq + 8, kq + 9).
struct WarpLane {
  Value warp, lane, gr, kq;
};

/// Builds the index arithmetic, loads and mma.sync of the lowerings.
struct Mma {
  OpBuilder &b;
  Location loc;

  Value c(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value add(Value x, int64_t y) { return y ? add(x, c(y)) : x; }
  Value mul(Value x, int64_t y) {
    return y == 1 ? x : arith::MulIOp::create(b, loc, x, c(y)).getResult();
  }
  Value div(Value x, int64_t y) {
    return arith::DivUIOp::create(b, loc, x, c(y));
  }
  /// The fragment rows of m tile `mt` for lane group `gr`, `rows` real.
  FragRows fragRows(Value mt, Value gr, int64_t rows);
  /// Thread `tid`'s warp, lane, lane group and pair column.
  WarpLane warpLane(Value tid);
  Value rem(Value x, int64_t y) {
    return arith::RemUIOp::create(b, loc, x, c(y));
  }
  Value lt(Value x, int64_t y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, x, c(y));
  }
  Value sel(Value p, Value x, Value y) {
    return arith::SelectOp::create(b, loc, p, x, y);
  }
  Value zeroI32() {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0));
  }
  Value zeroF32() {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
  }

  /// Byte address (as index) of the memref's aligned base pointer.
  Value base(Value memref) {
    return memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
  }
  /// An LLVM pointer in address space `as` (1: global, 3: shared).
  Value ptr(Value addr, unsigned as) {
    Value a64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), addr);
    MLIRContext *ctx = b.getContext();
    if (as == 3)
      return LLVM::IntToPtrOp::create(b, loc,
                                      LLVM::LLVMPointerType::get(ctx, 3), a64);
    Value p =
        LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(ctx), a64);
    return LLVM::AddrSpaceCastOp::create(
        b, loc, LLVM::LLVMPointerType::get(ctx, as), p);
  }
  /// A 32-bit load (a packed bf16 pair) at byte address `addr`.
  Value loadI32(Value addr, unsigned as) {
    return LLVM::LoadOp::create(b, loc, b.getI32Type(), ptr(addr, as),
                                /*alignment=*/4);
  }
  /// ldmatrix .x`num` (1, 2 or 4 8x8 b16 matrices) from the shared byte
  /// address `addr` of this lane's row; `trans` gives the .trans form.
  SmallVector<Value> ldmatrix(Value addr, int num, bool trans) {
    Type i32 = b.getI32Type();
    Type resTy = i32;
    if (num > 1)
      resTy = LLVM::LLVMStructType::getLiteral(
          b.getContext(), SmallVector<Type>(num, i32));
    Value frag = NVVM::LdMatrixOp::create(
        b, loc, resTy, ptr(addr, 3), num,
        trans ? NVVM::MMALayout::col : NVVM::MMALayout::row,
        NVVM::LdStMatrixShapeAttr::get(b.getContext(), 8, 8),
        NVVM::LdStMatrixEltType::B16);
    if (num == 1)
      return {frag};
    SmallVector<Value> out;
    for (int i = 0; i < num; ++i)
      out.push_back(LLVM::ExtractValueOp::create(b, loc, frag, i));
    return out;
  }
  /// f32 pair at [row, col] of a shared f32 tile.
  Value loadF32x2(Value memref, Value row, Value col) {
    return vector::LoadOp::create(b, loc, VectorType::get({2}, b.getF32Type()),
                                  memref, ValueRange{row, col},
                                  /*nontemporal=*/false, llvm::Align(8));
  }
  /// Packs two f32 into a bf16x2 register (round to nearest even).
  Value packBf16(Value v2f32) {
    Value h = arith::TruncFOp::create(
        b, loc, VectorType::get({2}, b.getBF16Type()), v2f32);
    Value i = vector::BitCastOp::create(
        b, loc, VectorType::get({1}, b.getI32Type()), h);
    return vector::ExtractOp::create(b, loc, i, 0);
  }

  /// D = A * B + C, m16n8k16 bf16 -> f32.
  SmallVector<Value> mma(ValueRange a, ValueRange bb, ValueRange acc) {
    Type f32 = b.getF32Type();
    auto resTy =
        LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
    Value d = NVVM::MmaOp::create(
        b, loc, resTy, a, bb, acc, ArrayRef<int64_t>{16, 8, 16}, std::nullopt,
        std::nullopt,
        std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16,
                                      NVVM::MMATypes::bf16},
        std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                       NVVM::MMALayout::col});
    SmallVector<Value> out;
    for (int64_t i = 0; i < 4; ++i)
      out.push_back(LLVM::ExtractValueOp::create(b, loc, d, i));
    return out;
  }

  /// for (p = warp; p < n; p += warps) body(p): every lane of a warp runs
  /// the same iterations, as mma.sync.aligned requires. With n <= warps, a
  /// branch (ptxas then keeps the B1 kernel's 16-key items at block 64
  /// within 128 registers; as a loop it spilled 8 bytes).
  void warpLoop(Value warp, int64_t warps, int64_t n,
                function_ref<void(Value)> body) {
    if (n <= warps) {
      // At most one item per warp: a branch, not a loop.
      scf::IfOp::create(b, loc, lt(warp, n), [&](OpBuilder &nb, Location l) {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        body(warp);
        scf::YieldOp::create(b, l);
      });
      return;
    }
    scf::ForOp::create(b, loc, warp, c(n), c(warps), ValueRange{},
                       [&](OpBuilder &nb, Location l, Value p, ValueRange) {
                         OpBuilder::InsertionGuard g(b);
                         b.setInsertionPoint(nb.getInsertionBlock(),
                                             nb.getInsertionPoint());
                         body(p);
                         scf::YieldOp::create(b, l);
                       });
  }

  /// acc = init; for (k = 0; k < n; k += step) acc = fn(k, acc)
  SmallVector<Value>
  reduce(int64_t n, int64_t step, ValueRange init,
         function_ref<SmallVector<Value>(Value, ValueRange)> fn) {
    auto loop = scf::ForOp::create(
        b, loc, c(0), c(n), c(step), init,
        [&](OpBuilder &nb, Location l, Value k, ValueRange args) {
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          scf::YieldOp::create(b, l, fn(k, args));
        });
    return SmallVector<Value>(loop.getResults());
  }

  /// if (cond) { store x, y at [row, col], [row, col+1] of an f32 tile }
  void storePairIf(Value cond, Value memref, Value row, Value col, Value x,
                   Value y) {
    scf::IfOp::create(b, loc, cond, [&](OpBuilder &nb, Location l) {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
      auto v2 = VectorType::get({2}, b.getF32Type());
      Value v = vector::FromElementsOp::create(b, l, v2, ValueRange{x, y});
      vector::StoreOp::create(b, l, v, memref, ValueRange{row, col},
                              /*nontemporal=*/false, llvm::Align(8));
      scf::YieldOp::create(b, l);
    });
  }
};

/// Static size of dimension `i` of a memref value.
int64_t staticDim(Value v, int64_t i);

/// Rows [T, H, W] of q or do: in global memory (the kernel argument) or
/// staged in shared memory by smla-gpu-map ([1, H, W] with padded rows).
struct Rows {
  int64_t tokenStride, rowStride;
  unsigned addressSpace; // 1 global, 3 shared
};

/// The strides and address space of `memref`'s rows.
Rows rowsOf(Value memref);

/// Whether the rows' layout is one the mma lowerings address by hand.
bool addressable(Value memref);

} // namespace mlir::smla::mma

#endif // SMLA_CONVERSION_SMLATONVVM_MMABUILDER_H
