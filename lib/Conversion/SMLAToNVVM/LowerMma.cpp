//===- LowerMma.cpp - tile_dot and dq_accumulate on tensor cores ----------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Both block products as warp-level nvvm.mma.sync m16n8k16 (bf16 x bf16,
// f32 accumulators), the heads as M, padded to a multiple of 16:
//
//   tile_dot       C[h, j] = sum_c lhs[t, g*Hg + h, c] * tile[j, c]
//                  A = lhs rows (global, 32-bit loads of bf16 pairs),
//                  B = key rows (shared, "col" layout = tile rows as they
//                  are stored, 32-bit loads).
//   dq_accumulate  acc[h, c] += sum_j bf16(ds[h, j]) * tile[j, c]
//                  A = dS (shared f32, rounded to bf16 and packed),
//                  B = tile (shared, ldmatrix.x4.trans: two n8 tiles).
//
// Fragment layout (PTX ISA, mma.m16n8k16 .bf16): with gr = lane / 4 and
// kq = 2 * (lane % 4), A regs are rows (gr, gr+8) x cols (kq, kq+8) as
// packed pairs, B regs are col gr x rows (kq, kq+8), C/D are rows
// (gr, gr+8) x cols (kq, kq+1).
//
// Padded head rows (h >= Hg) never form an address outside this token's
// rows: their loads go to row 0 of the group and are replaced by zero, and
// their results are never stored.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

using namespace mlir;
using namespace mlir::smla;

namespace {
constexpr int64_t kMmaLanes = 32;

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
  /// the same iterations, as mma.sync.aligned requires.
  void warpLoop(Value warp, int64_t warps, int64_t n,
                function_ref<void(Value)> body) {
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

int64_t staticDim(Value v, int64_t i) {
  return cast<MemRefType>(v.getType()).getDimSize(i);
}
} // namespace

namespace mlir::smla {

bool canUseMma(TileDotOp op) {
  auto lhs = op.getLhs().getType();
  auto tile = op.getTile().getType();
  int64_t block = op.getResult().getType().getDimSize(1);
  int64_t width = lhs.getDimSize(2);
  return !lhs.isDynamicDim(1) && !lhs.isDynamicDim(2) &&
         tile.hasStaticShape() && width % 16 == 0 && block % 8 == 0 &&
         tile.getDimSize(1) >= width && tile.getDimSize(1) % 2 == 0 &&
         lhs.getElementType().isBF16() && tile.getElementType().isBF16();
}

bool canUseMma(DqAccumulateOp op) {
  auto tile = op.getTile().getType();
  int64_t width = op.getAcc().getType().getDimSize(1);
  int64_t block = op.getDs().getType().getDimSize(1);
  return tile.hasStaticShape() && tile.getElementType().isBF16() &&
         width % 16 == 0 && block % 16 == 0 && tile.getDimSize(1) == width &&
         tile.getDimSize(0) == block;
}

void lowerTileDotMma(CtaEmitter &e, TileDotOp op) {
  Mma m{e.b, e.loc};
  auto resType = op.getResult().getType();
  int64_t hg = resType.getDimSize(0), block = resType.getDimSize(1);
  int64_t heads = staticDim(op.getLhs(), 1), width = staticDim(op.getLhs(), 2);
  int64_t tileW = staticDim(op.getTile(), 1);
  int64_t mTiles = llvm::divideCeil(hg, 16), nTiles = block / 8;
  int64_t warps = e.threads / kMmaLanes;

  Value warp = m.div(e.tid, kMmaLanes);
  Value lane = m.rem(e.tid, kMmaLanes);
  Value gr = m.div(lane, 4);
  Value kq = m.mul(m.rem(lane, 4), 2);
  Value lhsBase = m.base(op.getLhs()), tileBase = m.base(op.getTile());
  // Element offset of head g*Hg of token t: (t * H + g * Hg) * W.
  Value rowBase = m.mul(
      m.add(m.mul(op.getToken(), heads), m.mul(op.getGroup(), hg)), width);
  m.warpLoop(warp, warps, mTiles * nTiles, [&](Value p) {
    Value mt = m.div(p, nTiles), nt = m.rem(p, nTiles);
    Value r0 = m.add(m.mul(mt, 16), gr), r1 = m.add(r0, 8);
    Value ok0 = m.lt(r0, hg), ok1 = m.lt(r1, hg);
    Value zero = m.c(0);
    Value s0 = m.sel(ok0, r0, zero), s1 = m.sel(ok1, r1, zero);
    // Byte addresses of this lane's A pairs (k = 0) and B pair (k = 0).
    auto aAddr = [&](Value s) {
      return m.add(lhsBase,
                   m.mul(m.add(m.add(rowBase, m.mul(s, width)), kq), 2));
    };
    Value a0Addr = aAddr(s0);
    Value a1Addr = aAddr(s1);
    Value n = m.add(m.mul(nt, 8), gr);
    Value bAddr = m.add(tileBase, m.mul(m.add(m.mul(n, tileW), kq), 2));
    Value z = m.zeroF32(), zi = m.zeroI32();
    SmallVector<Value> acc = m.reduce(
        width, 16, ValueRange{z, z, z, z},
        [&](Value k, ValueRange c) -> SmallVector<Value> {
          Value kb = m.mul(k, 2);
          Value a0 = m.sel(ok0, m.loadI32(m.add(a0Addr, kb), 1), zi);
          Value a1 = m.sel(ok1, m.loadI32(m.add(a1Addr, kb), 1), zi);
          Value a2 = m.sel(ok0, m.loadI32(m.add(m.add(a0Addr, kb), 16), 1), zi);
          Value a3 = m.sel(ok1, m.loadI32(m.add(m.add(a1Addr, kb), 16), 1), zi);
          Value b0 = m.loadI32(m.add(bAddr, kb), 3);
          Value b1 = m.loadI32(m.add(m.add(bAddr, kb), 16), 3);
          return m.mma({a0, a1, a2, a3}, {b0, b1}, c);
        });
    Value col = m.add(m.mul(nt, 8), kq);
    m.storePairIf(ok0, op.getResult(), r0, col, acc[0], acc[1]);
    m.storePairIf(ok1, op.getResult(), r1, col, acc[2], acc[3]);
  });
  e.barrier();
}

void lowerDqAccumulateMma(CtaEmitter &e, DqAccumulateOp op) {
  Mma m{e.b, e.loc};
  auto accType = op.getAcc().getType();
  int64_t hg = accType.getDimSize(0), width = accType.getDimSize(1);
  int64_t block = op.getDs().getType().getDimSize(1);
  int64_t mTiles = llvm::divideCeil(hg, 16), nPairs = width / 16;
  int64_t warps = e.threads / kMmaLanes;

  Value warp = m.div(e.tid, kMmaLanes);
  Value lane = m.rem(e.tid, kMmaLanes);
  Value gr = m.div(lane, 4);
  Value kq = m.mul(m.rem(lane, 4), 2);
  Value tileBase = m.base(op.getTile());
  // ldmatrix.x4.trans: lane l gives the row address of matrix l / 8:
  // tile row k + l % 16, column n0 + 8 * (l / 16).
  Value ldRow = m.rem(lane, 16), ldCol = m.mul(m.div(lane, 16), 8);
  Value acc = op.getAcc(), ds = op.getDs();
  m.warpLoop(warp, warps, mTiles * nPairs, [&](Value p) {
    Value mt = m.div(p, nPairs), n0 = m.mul(m.rem(p, nPairs), 16);
    Value r0 = m.add(m.mul(mt, 16), gr), r1 = m.add(r0, 8);
    Value ok0 = m.lt(r0, hg), ok1 = m.lt(r1, hg);
    Value zero = m.c(0);
    Value s0 = m.sel(ok0, r0, zero), s1 = m.sel(ok1, r1, zero);
    Value z = m.zeroF32(), zi = m.zeroI32();
    // C of the two n8 tiles: (r0, c), (r0, c+1), (r1, c), (r1, c+1).
    SmallVector<Value> init;
    SmallVector<Value> cols;
    for (int64_t t = 0; t < 2; ++t) {
      Value col = m.add(m.add(n0, t * 8), kq);
      cols.push_back(col);
      Value x0 = m.loadF32x2(acc, s0, col), x1 = m.loadF32x2(acc, s1, col);
      for (auto [ok, x] : {std::pair{ok0, x0}, std::pair{ok1, x1}})
        for (int64_t i = 0; i < 2; ++i)
          init.push_back(
              m.sel(ok, vector::ExtractOp::create(m.b, m.loc, x, i), z));
    }
    Value bRow =
        m.add(tileBase, m.mul(m.add(m.mul(ldRow, width), m.add(n0, ldCol)), 2));
    SmallVector<Value> out = m.reduce(
        block, 16, init, [&](Value k, ValueRange c) -> SmallVector<Value> {
          Value kc = m.add(k, kq), kc8 = m.add(kc, 8);
          Value a0 = m.sel(ok0, m.packBf16(m.loadF32x2(ds, s0, kc)), zi);
          Value a1 = m.sel(ok1, m.packBf16(m.loadF32x2(ds, s1, kc)), zi);
          Value a2 = m.sel(ok0, m.packBf16(m.loadF32x2(ds, s0, kc8)), zi);
          Value a3 = m.sel(ok1, m.packBf16(m.loadF32x2(ds, s1, kc8)), zi);
          Value addr = m.add(bRow, m.mul(k, width * 2));
          Type i32 = m.b.getI32Type();
          auto fragTy = LLVM::LLVMStructType::getLiteral(m.b.getContext(),
                                                         {i32, i32, i32, i32});
          Value frag = NVVM::LdMatrixOp::create(
              m.b, m.loc, fragTy, m.ptr(addr, 3), 4, NVVM::MMALayout::col,
              NVVM::LdStMatrixShapeAttr::get(m.b.getContext(), 8, 8),
              NVVM::LdStMatrixEltType::B16);
          SmallVector<Value> bq;
          for (int64_t i = 0; i < 4; ++i)
            bq.push_back(LLVM::ExtractValueOp::create(m.b, m.loc, frag, i));
          SmallVector<Value> d0 =
              m.mma({a0, a1, a2, a3}, {bq[0], bq[1]}, c.take_front(4));
          SmallVector<Value> d1 =
              m.mma({a0, a1, a2, a3}, {bq[2], bq[3]}, c.drop_front(4));
          d0.append(d1);
          return d0;
        });
    for (int64_t t = 0; t < 2; ++t) {
      m.storePairIf(ok0, acc, r0, cols[t], out[4 * t], out[4 * t + 1]);
      m.storePairIf(ok1, acc, r1, cols[t], out[4 * t + 2], out[4 * t + 3]);
    }
  });
  e.barrier();
}

} // namespace mlir::smla
