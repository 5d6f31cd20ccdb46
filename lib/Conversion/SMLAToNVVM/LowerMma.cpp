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
//   scatter_dkv    dkv[idx[j], c] += sum_h bf16(ds[h, j]) * q[h, c]
//                                  + sum_h bf16(p[h, j]) * do[h, c]
//                  M = slots, N = columns, K = heads (padded to 16);
//                  A = dS^T / P^T (shared f32, transposed while packing),
//                  B = q / do rows (global, 32-bit loads, see below).
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

/// The two rows of an m16 tile that lane group `gr` (lane / 4) holds in
/// the A and C fragments: r0 = 16 mt + gr and r1 = r0 + 8. Rows >= the
/// tile's real row count are padding: ok0/ok1 are false, and s0/s1 (the
/// rows actually addressed) fall back to row 0, so no address past the
/// real rows is formed.
struct FragRows {
  Value r0, r1, ok0, ok1, s0, s1;
};

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

FragRows Mma::fragRows(Value mt, Value gr, int64_t rows) {
  FragRows r;
  r.r0 = add(mul(mt, 16), gr);
  r.r1 = add(r.r0, 8);
  r.ok0 = lt(r.r0, rows);
  r.ok1 = lt(r.r1, rows);
  r.s0 = sel(r.ok0, r.r0, c(0));
  r.s1 = sel(r.ok1, r.r1, c(0));
  return r;
}

int64_t staticDim(Value v, int64_t i) {
  return cast<MemRefType>(v.getType()).getDimSize(i);
}

/// Rows [T, H, W] of q or do: in global memory (the kernel argument) or
/// staged in shared memory by smla-gpu-map ([1, H, W] with padded rows).
struct Rows {
  int64_t tokenStride, rowStride;
  unsigned addressSpace; // 1 global, 3 shared
};

Rows rowsOf(Value memref) {
  auto type = cast<MemRefType>(memref.getType());
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(type.getStridesAndOffset(strides, offset)))
    strides = {ShapedType::kDynamic, type.getDimSize(2), 1};
  bool shared =
      gpu::GPUDialect::isWorkgroupMemoryAddressSpace(type.getMemorySpace());
  return {strides[0], strides[1], shared ? 3u : 1u};
}

/// Whether the rows' layout is one the mma lowerings address by hand.
bool addressable(Value memref) {
  auto type = cast<MemRefType>(memref.getType());
  SmallVector<int64_t> strides;
  int64_t offset;
  return succeeded(type.getStridesAndOffset(strides, offset)) &&
         offset == 0 && strides.size() == 3 && strides[2] == 1 &&
         !ShapedType::isDynamic(strides[0]) &&
         !ShapedType::isDynamic(strides[1]) && strides[1] % 2 == 0;
}
} // namespace

namespace mlir::smla {

void lowerTileDotPairMma(CtaEmitter &e, TileDotOp first, TileDotOp second);

bool canUseMma(TileDotOp op) {
  auto lhs = op.getLhs().getType();
  auto tile = op.getTile().getType();
  int64_t block = op.getResult().getType().getDimSize(1);
  int64_t width = lhs.getDimSize(2);
  return !lhs.isDynamicDim(1) && !lhs.isDynamicDim(2) &&
         addressable(op.getLhs()) &&
         tile.hasStaticShape() && width % 16 == 0 && block % 8 == 0 &&
         tile.getDimSize(1) >= width && tile.getDimSize(1) % 2 == 0 &&
         lhs.getElementType().isBF16() && tile.getElementType().isBF16();
}

bool canFuseTileDots(TileDotOp first, TileDotOp second) {
  Value a = first.getResult(), b = second.getResult();
  return canUseMma(first) && canUseMma(second) &&
         first.getTile() == second.getTile() &&
         first.getToken() == second.getToken() &&
         first.getHeadBlock() == second.getHeadBlock() &&
         a.getType() == b.getType() && a != b && second.getLhs() != a &&
         first.getLhs() != b && second.getTile() != a;
}

void lowerTileDotPair(CtaEmitter &e, TileDotOp first, TileDotOp second) {
  lowerTileDotPairMma(e, first, second);
}

bool canUseMma(ScatterDkvOp op, int64_t threads) {
  auto q = op.getQ().getType(), dout = op.getDout().getType();
  auto dkv = op.getDkv().getType();
  int64_t block = op.getDs().getType().getDimSize(1);
  int64_t width = dkv.getDimSize(2), d = dout.getDimSize(2);
  int64_t warps = threads / kMmaLanes;
  return addressable(op.getQ()) && addressable(op.getDout()) &&
         !q.isDynamicDim(1) && !q.isDynamicDim(2) && !dout.isDynamicDim(1) &&
         !dout.isDynamicDim(2) && !dkv.isDynamicDim(1) &&
         !dkv.isDynamicDim(2) && q.getDimSize(2) == width &&
         q.getDimSize(1) == dout.getDimSize(1) && width % 16 == 0 &&
         d % 16 == 0 && d <= width && block % 16 == 0 &&
         warps % (block / 16) == 0;
}

bool canUseMma(DqAccumulateOp op) {
  auto tile = op.getTile().getType();
  int64_t width = op.getAcc().getType().getDimSize(1);
  int64_t block = op.getDs().getType().getDimSize(1);
  return tile.hasStaticShape() && tile.getElementType().isBF16() &&
         width % 16 == 0 && block % 16 == 0 && tile.getDimSize(1) >= width &&
         tile.getDimSize(1) % 8 == 0 && tile.getDimSize(0) == block;
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
  Rows rows = rowsOf(op.getLhs());
  (void)heads;
  // Element offset of head hb*Hb of token t.
  Value rowBase = m.add(m.mul(op.getToken(), rows.tokenStride),
                        m.mul(m.mul(op.getHeadBlock(), hg), rows.rowStride));
  m.warpLoop(warp, warps, mTiles * nTiles, [&](Value p) {
    Value mt = m.div(p, nTiles), nt = m.rem(p, nTiles);
    FragRows fr = m.fragRows(mt, gr, hg);
    Value ok0 = fr.ok0, ok1 = fr.ok1, s0 = fr.s0, s1 = fr.s1;
    // Byte addresses of this lane's A pairs (k = 0) and B pair (k = 0).
    auto aAddr = [&](Value s) {
      return m.add(
          lhsBase,
          m.mul(m.add(m.add(rowBase, m.mul(s, rows.rowStride)), kq), 2));
    };
    Value a0Addr = aAddr(s0);
    Value a1Addr = aAddr(s1);
    Value n = m.add(m.mul(nt, 8), gr);
    Value bAddr = m.add(tileBase, m.mul(m.add(m.mul(n, tileW), kq), 2));
    Value z = m.zeroF32(), zi = m.zeroI32();
    // One k step of 16: acc += A[:, k..k+16) * B[k..k+16, :].
    auto step = [&](Value k, ValueRange c) -> SmallVector<Value> {
      Value kb = m.mul(k, 2);
      unsigned as = rows.addressSpace;
      Value a0 = m.sel(ok0, m.loadI32(m.add(a0Addr, kb), as), zi);
      Value a1 = m.sel(ok1, m.loadI32(m.add(a1Addr, kb), as), zi);
      Value a2 = m.sel(ok0, m.loadI32(m.add(m.add(a0Addr, kb), 16), as), zi);
      Value a3 = m.sel(ok1, m.loadI32(m.add(m.add(a1Addr, kb), 16), as), zi);
      Value b0 = m.loadI32(m.add(bAddr, kb), 3);
      Value b1 = m.loadI32(m.add(m.add(bAddr, kb), 16), 3);
      return m.mma({a0, a1, a2, a3}, {b0, b1}, c);
    };
    // Two independent accumulators (even and odd k steps) halve the chain
    // of dependent mma.sync; an odd step count ends with one more step.
    int64_t pairs = width / 32;
    SmallVector<Value> both = m.reduce(
        pairs * 32, 32, ValueRange{z, z, z, z, z, z, z, z},
        [&](Value k, ValueRange c) -> SmallVector<Value> {
          SmallVector<Value> even = step(k, c.take_front(4));
          SmallVector<Value> odd = step(m.add(k, 16), c.drop_front(4));
          even.append(odd);
          return even;
        });
    SmallVector<Value> acc;
    for (int64_t i = 0; i < 4; ++i)
      acc.push_back(arith::AddFOp::create(m.b, m.loc, both[i], both[i + 4]));
    if (width % 32)
      acc = step(m.c(pairs * 32), acc);
    Value col = m.add(m.mul(nt, 8), kq);
    m.storePairIf(ok0, op.getResult(), fr.r0, col, acc[0], acc[1]);
    m.storePairIf(ok1, op.getResult(), fr.r1, col, acc[2], acc[3]);
  });
}

/// Both block products of a top-k block in one pass: S = Q.K^T and
/// dP = dO.V^T read the same key tile (V is its first D columns), so each
/// warp loads a key fragment once for both and runs the two mma chains
/// side by side (they are independent, which also hides mma latency). Over
/// the columns only the wider product reads (the rope tail of q), the
/// wider one runs alone.
void lowerTileDotPairMma(CtaEmitter &e, TileDotOp first, TileDotOp second) {
  Mma m{e.b, e.loc};
  auto resType = first.getResult().getType();
  int64_t hg = resType.getDimSize(0), block = resType.getDimSize(1);
  int64_t tileW = staticDim(first.getTile(), 1);
  int64_t mTiles = llvm::divideCeil(hg, 16), nTiles = block / 8;
  int64_t warps = e.threads / kMmaLanes;

  Value warp = m.div(e.tid, kMmaLanes);
  Value lane = m.rem(e.tid, kMmaLanes);
  Value gr = m.div(lane, 4);
  Value kq = m.mul(m.rem(lane, 4), 2);
  Value tileBase = m.base(first.getTile());
  struct Lhs {
    Value base, rowBase, result;
    Rows rows;
    int64_t width;
  };
  auto lhsOf = [&](TileDotOp op) {
    Lhs l;
    l.base = m.base(op.getLhs());
    l.rows = rowsOf(op.getLhs());
    // Element offset of head hb*Hb of token t.
    l.rowBase = m.add(m.mul(op.getToken(), l.rows.tokenStride),
                      m.mul(m.mul(op.getHeadBlock(), hg), l.rows.rowStride));
    l.result = op.getResult();
    l.width = staticDim(op.getLhs(), 2);
    return l;
  };
  Lhs lhs[2] = {lhsOf(first), lhsOf(second)};
  if (lhs[0].width < lhs[1].width)
    std::swap(lhs[0], lhs[1]);
  int64_t shared = lhs[1].width, wide = lhs[0].width;

  m.warpLoop(warp, warps, mTiles * nTiles, [&](Value p) {
    Value mt = m.div(p, nTiles), nt = m.rem(p, nTiles);
    FragRows fr = m.fragRows(mt, gr, hg);
    // Byte addresses of this lane's A pairs (k = 0) in both lhs, and of its
    // B pair (k = 0).
    SmallVector<std::pair<Value, Value>> aAddr;
    for (const Lhs &l : lhs) {
      auto addr = [&](Value s) {
        return m.add(l.base, m.mul(m.add(m.add(l.rowBase,
                                               m.mul(s, l.rows.rowStride)),
                                         kq),
                                   2));
      };
      aAddr.push_back({addr(fr.s0), addr(fr.s1)});
    }
    Value n = m.add(m.mul(nt, 8), gr);
    Value bAddr = m.add(tileBase, m.mul(m.add(m.mul(n, tileW), kq), 2));
    Value z = m.zeroF32(), zi = m.zeroI32();
    auto aFrag = [&](int i, Value kb) -> SmallVector<Value> {
      unsigned as = lhs[i].rows.addressSpace;
      Value r0 = m.add(aAddr[i].first, kb), r1 = m.add(aAddr[i].second, kb);
      return {m.sel(fr.ok0, m.loadI32(r0, as), zi),
              m.sel(fr.ok1, m.loadI32(r1, as), zi),
              m.sel(fr.ok0, m.loadI32(m.add(r0, 16), as), zi),
              m.sel(fr.ok1, m.loadI32(m.add(r1, 16), as), zi)};
    };
    auto bFrag = [&](Value kb) -> SmallVector<Value> {
      return {m.loadI32(m.add(bAddr, kb), 3),
              m.loadI32(m.add(m.add(bAddr, kb), 16), 3)};
    };
    SmallVector<Value> acc = m.reduce(
        shared, 16, ValueRange{z, z, z, z, z, z, z, z},
        [&](Value k, ValueRange c) -> SmallVector<Value> {
          Value kb = m.mul(k, 2);
          SmallVector<Value> b = bFrag(kb);
          SmallVector<Value> out = m.mma(aFrag(0, kb), b, c.take_front(4));
          SmallVector<Value> two = m.mma(aFrag(1, kb), b, c.drop_front(4));
          out.append(two);
          return out;
        });
    if (wide > shared) {
      SmallVector<Value> tail = m.reduce(
          wide - shared, 16, ValueRange(acc).take_front(4),
          [&](Value k, ValueRange c) -> SmallVector<Value> {
            Value kb = m.mul(m.add(k, shared), 2);
            return m.mma(aFrag(0, kb), bFrag(kb), c);
          });
      std::copy(tail.begin(), tail.end(), acc.begin());
    }
    Value col = m.add(m.mul(nt, 8), kq);
    for (int i = 0; i < 2; ++i) {
      m.storePairIf(fr.ok0, lhs[i].result, fr.r0, col, acc[4 * i],
                    acc[4 * i + 1]);
      m.storePairIf(fr.ok1, lhs[i].result, fr.r1, col, acc[4 * i + 2],
                    acc[4 * i + 3]);
    }
  });
}

/// dQ[h, c] += dS[h, :] . K[:, c]: M = heads, N = columns, K = slots. When
/// the warps divide evenly among the m tiles, each warp keeps one m tile
/// and loads its dS A fragments (rounded to bf16) once for the whole op,
/// then walks its share of the column pairs; otherwise (more m tiles than
/// warps) every (m tile, column pair) item reloads them.
void lowerDqAccumulateMma(CtaEmitter &e, DqAccumulateOp op) {
  Mma m{e.b, e.loc};
  auto accType = op.getAcc().getType();
  int64_t hg = accType.getDimSize(0), width = accType.getDimSize(1);
  int64_t block = op.getDs().getType().getDimSize(1);
  int64_t tileW = staticDim(op.getTile(), 1); // row stride, >= width
  int64_t mTiles = llvm::divideCeil(hg, 16), nPairs = width / 16;
  int64_t warps = e.threads / kMmaLanes;
  bool keepA = warps % mTiles == 0;

  Value warp = m.div(e.tid, kMmaLanes);
  Value lane = m.rem(e.tid, kMmaLanes);
  Value gr = m.div(lane, 4);
  Value kq = m.mul(m.rem(lane, 4), 2);
  Value tileBase = m.base(op.getTile());
  // ldmatrix.x4.trans: lane l gives the row address of matrix l / 8:
  // tile row k + l % 16, column n0 + 8 * (l / 16).
  Value ldRow = m.rem(lane, 16), ldCol = m.mul(m.div(lane, 16), 8);
  Value acc = op.getAcc(), ds = op.getDs();
  Value zi = m.zeroI32();

  // Rows >= Hg read row 0 and are replaced by zero, and are never stored.
  auto rowsOfTile = [&](Value mt) { return m.fragRows(mt, gr, hg); };
  // A fragment of the k step at slot k: dS rows (r0, r1) x slots (k + kq,
  // k + kq + 8), rounded to bf16.
  auto aFrag = [&](const FragRows &r, Value k) -> SmallVector<Value> {
    Value kc = m.add(k, kq), kc8 = m.add(kc, 8);
    return {m.sel(r.ok0, m.packBf16(m.loadF32x2(ds, r.s0, kc)), zi),
            m.sel(r.ok1, m.packBf16(m.loadF32x2(ds, r.s1, kc)), zi),
            m.sel(r.ok0, m.packBf16(m.loadF32x2(ds, r.s0, kc8)), zi),
            m.sel(r.ok1, m.packBf16(m.loadF32x2(ds, r.s1, kc8)), zi)};
  };
  // C += A . B for the two n8 tiles at columns n0 and n0 + 8, k step k.
  auto step = [&](Value n0, Value k, ArrayRef<Value> a,
                  ValueRange c) -> SmallVector<Value> {
    Value bRow = m.add(
        tileBase, m.mul(m.add(m.mul(ldRow, tileW), m.add(n0, ldCol)), 2));
    Value addr = m.add(bRow, m.mul(k, tileW * 2));
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
    SmallVector<Value> d0 = m.mma(a, {bq[0], bq[1]}, c.take_front(4));
    SmallVector<Value> d1 = m.mma(a, {bq[2], bq[3]}, c.drop_front(4));
    d0.append(d1);
    return d0;
  };
  // Loads the C fragments of the pair at n0, runs `body`, stores them.
  auto pair = [&](const FragRows &r, Value n0,
                  function_ref<SmallVector<Value>(ValueRange)> body) {
    Value z = m.zeroF32();
    SmallVector<Value> init, cols;
    for (int64_t t = 0; t < 2; ++t) {
      Value col = m.add(m.add(n0, t * 8), kq);
      cols.push_back(col);
      Value x0 = m.loadF32x2(acc, r.s0, col), x1 = m.loadF32x2(acc, r.s1, col);
      for (auto [ok, x] : {std::pair{r.ok0, x0}, std::pair{r.ok1, x1}})
        for (int64_t i = 0; i < 2; ++i)
          init.push_back(
              m.sel(ok, vector::ExtractOp::create(m.b, m.loc, x, i), z));
    }
    SmallVector<Value> out = body(init);
    for (int64_t t = 0; t < 2; ++t) {
      m.storePairIf(r.ok0, acc, r.r0, cols[t], out[4 * t], out[4 * t + 1]);
      m.storePairIf(r.ok1, acc, r.r1, cols[t], out[4 * t + 2], out[4 * t + 3]);
    }
  };

  if (keepA) {
    FragRows r = rowsOfTile(m.rem(warp, mTiles));
    SmallVector<SmallVector<Value>> a;
    for (int64_t k = 0; k < block; k += 16)
      a.push_back(aFrag(r, m.c(k)));
    int64_t stride = warps / mTiles;
    scf::ForOp::create(
        m.b, m.loc, m.div(warp, mTiles), m.c(nPairs), m.c(stride),
        ValueRange{}, [&](OpBuilder &nb, Location l, Value np, ValueRange) {
          OpBuilder::InsertionGuard g(m.b);
          m.b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          Value n0 = m.mul(np, 16);
          pair(r, n0, [&](ValueRange init) {
            SmallVector<Value> c(init);
            for (int64_t k = 0; k < block; k += 16)
              c = step(n0, m.c(k), a[k / 16], c);
            return c;
          });
          scf::YieldOp::create(m.b, l);
        });
    return;
  }
  m.warpLoop(warp, warps, mTiles * nPairs, [&](Value p) {
    FragRows r = rowsOfTile(m.div(p, nPairs));
    Value n0 = m.mul(m.rem(p, nPairs), 16);
    pair(r, n0, [&](ValueRange init) {
      return m.reduce(block, 16, init,
                      [&](Value k, ValueRange c) -> SmallVector<Value> {
                        return step(n0, k, aFrag(r, k), c);
                      });
    });
  });
}

/// The B operand of scatter_dkv is q (or do) with K = heads, but q is
/// stored head-major, so a bf16 pair along K is two rows apart. Instead of
/// staging q transposed, each lane loads the 32-bit pairs q[h][c0 + 2gr,
/// c0 + 2gr + 1] for its four heads h = kq, kq+1, kq+8, kq+9 and splits
/// them: the low halves are the B fragment of n8 tile "even" (columns
/// c0 + 2n), the high halves that of tile "odd" (columns c0 + 2n + 1). The
/// C fragments of the two tiles then hold, per row, the four consecutive
/// columns c0 + 4 (lane % 4) + {0, 1, 2, 3}: one red.global.add.v4.f32.
void lowerScatterDkvMma(CtaEmitter &e, ScatterDkvOp op, const LaneFn &mask,
                        const LaneFn &index) {
  Mma m{e.b, e.loc};
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t hg = op.getDs().getType().getDimSize(0);
  int64_t block = op.getDs().getType().getDimSize(1);
  int64_t heads = staticDim(op.getQ(), 1), width = staticDim(op.getQ(), 2);
  int64_t d = staticDim(op.getDout(), 2);
  int64_t mTiles = block / 16, kTiles = llvm::divideCeil(hg, 16);
  int64_t warps = e.threads / kMmaLanes, stride = warps / mTiles;
  int64_t groups16 = width / 16;

  Value warp = m.div(e.tid, kMmaLanes);
  Value lane = m.rem(e.tid, kMmaLanes);
  Value gr = m.div(lane, 4);
  Value kq = m.mul(m.rem(lane, 4), 2);
  Value zi = m.zeroI32();
  // Each warp keeps one m tile (16 slots) for the whole op.
  Value j0 = m.add(m.mul(m.rem(warp, mTiles), 16), gr), j1 = m.add(j0, 8);

  // A fragments (per k tile): rows (j0, j1) x heads (kq, kq+8) as pairs,
  // A[j][h] = tile[h][j]; heads >= Hg are zero.
  auto aFrag = [&](Value tile, int64_t kt) {
    SmallVector<Value> regs;
    for (int64_t kk : {0, 8})
      for (Value j : {j0, j1}) {
        SmallVector<Value> pair;
        for (int64_t i = 0; i < 2; ++i) {
          Value h = m.add(m.add(kq, kt * 16 + kk), i);
          Value ok = m.lt(h, hg);
          Value x = memref::LoadOp::create(b, loc, tile,
                                           ValueRange{m.sel(ok, h, m.c(0)), j});
          pair.push_back(m.sel(ok, x, m.zeroF32()));
        }
        regs.push_back(m.packBf16(vector::FromElementsOp::create(
            b, loc, VectorType::get({2}, b.getF32Type()), pair)));
      }
    // regs are (kq, j0), (kq, j1), (kq+8, j0), (kq+8, j1): a0..a3.
    return regs;
  };
  SmallVector<SmallVector<Value>> aDs, aP;
  for (int64_t kt = 0; kt < kTiles; ++kt) {
    aDs.push_back(aFrag(op.getDs(), kt));
    aP.push_back(aFrag(op.getProbs(), kt));
  }

  // Byte address of this lane's pair in row h of the token's q / do heads,
  // column 2 gr (heads >= Hg load from the group's first row, then zero).
  (void)heads;
  struct RowPtr {
    Value addr, ok;
    unsigned as;
  };
  auto rowPtrs = [&](Value memref, int64_t kt) {
    SmallVector<RowPtr> out;
    Rows rows = rowsOf(memref);
    Value base = m.base(memref);
    Value first = m.add(m.mul(op.getToken(), rows.tokenStride),
                        m.mul(m.mul(op.getHeadBlock(), hg), rows.rowStride));
    for (int64_t kk : {0, 1, 8, 9}) {
      Value h = m.add(kq, kt * 16 + kk);
      Value ok = m.lt(h, hg);
      Value elem = m.add(m.add(first, m.mul(m.sel(ok, h, m.c(0)),
                                            rows.rowStride)),
                         m.mul(gr, 2));
      out.push_back({m.add(base, m.mul(elem, 2)), ok, rows.addressSpace});
    }
    return out;
  };
  SmallVector<SmallVector<RowPtr>> qRows, doRows;
  for (int64_t kt = 0; kt < kTiles; ++kt) {
    qRows.push_back(rowPtrs(op.getQ(), kt));
    doRows.push_back(rowPtrs(op.getDout(), kt));
  }

  Value valid0 = mask(b, loc, j0), valid1 = mask(b, loc, j1);
  Value raw0 = index(b, loc, j0), raw1 = index(b, loc, j1);

  auto i32c = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
  };
  // acc (even tile c0..c3, odd tile c0..c3) += A * B for the 16 columns
  // at byte offset colBytes of the rows.
  auto product = [&](ArrayRef<SmallVector<Value>> a,
                     ArrayRef<SmallVector<RowPtr>> rows, Value colBytes,
                     ValueRange acc) {
    SmallVector<Value> even(acc.take_front(4)), odd(acc.drop_front(4));
    for (int64_t kt = 0; kt < kTiles; ++kt) {
      SmallVector<Value> x;
      for (const RowPtr &r : rows[kt])
        x.push_back(
            m.sel(r.ok, m.loadI32(m.add(r.addr, colBytes), r.as), zi));
      Value lo = i32c(0xffff), hi = i32c(static_cast<int32_t>(0xffff0000u));
      Value sixteen = i32c(16);
      auto evenOf = [&](Value k0, Value k1) {
        return arith::OrIOp::create(
            b, loc, arith::AndIOp::create(b, loc, k0, lo),
            arith::ShLIOp::create(b, loc, k1, sixteen));
      };
      auto oddOf = [&](Value k0, Value k1) {
        return arith::OrIOp::create(
            b, loc, arith::ShRUIOp::create(b, loc, k0, sixteen),
            arith::AndIOp::create(b, loc, k1, hi));
      };
      even = m.mma(a[kt], {evenOf(x[0], x[1]), evenOf(x[2], x[3])}, even);
      odd = m.mma(a[kt], {oddOf(x[0], x[1]), oddOf(x[2], x[3])}, odd);
    }
    even.append(odd);
    return even;
  };

  Value first = m.div(warp, mTiles);
  scf::ForOp::create(
      b, loc, first, m.c(groups16), m.c(stride), ValueRange{},
      [&](OpBuilder &nb, Location l, Value cg, ValueRange) {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        Value c0 = m.mul(cg, 16);
        Value colBytes = m.mul(c0, 2);
        Value z = m.zeroF32();
        SmallVector<Value> acc =
            product(aDs, qRows, colBytes, ValueRange{z, z, z, z, z, z, z, z});
        // Columns < D also get P^T . dO (D is a multiple of 16).
        auto withV = scf::IfOp::create(
            b, loc, TypeRange(ValueRange(acc)), m.lt(c0, d),
            /*withElseRegion=*/true);
        {
          OpBuilder::InsertionGuard g2(b);
          b.setInsertionPointToStart(&withV.getThenRegion().front());
          scf::YieldOp::create(b, loc, product(aP, doRows, colBytes, acc));
          b.setInsertionPointToStart(&withV.getElseRegion().front());
          scf::YieldOp::create(b, loc, acc);
        }
        ValueRange r = withV.getResults();
        Value col = m.add(c0, m.mul(kq, 2));
        emitMaskedRedV4(b, loc, op, valid0, raw0, col,
                        ValueRange{r[0], r[4], r[1], r[5]});
        emitMaskedRedV4(b, loc, op, valid1, raw1, col,
                        ValueRange{r[2], r[6], r[3], r[7]});
        scf::YieldOp::create(b, l);
      });
}

} // namespace mlir::smla
