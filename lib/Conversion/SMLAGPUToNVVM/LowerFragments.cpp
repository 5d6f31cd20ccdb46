//===- LowerFragments.cpp - accumulator fragments made explicit -----------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// The ops that read, write and reduce m64nN wgmma accumulator fragments.
// Thread t of a warpgroup (warp w = t / 32, lane l = t % 32) holds rows
// r0 = 16 w + l / 4 and r1 = r0 + 8; element 4 i + {0, 1} is (r0, 8 i +
// 2 (l % 4) + {0, 1}), element 4 i + {2, 3} is (r1, the same columns).
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAGPUToNVVM/SMLAGPUToNVVM.h"
#include "smla/Conversion/SMLAToNVVM/MmaBuilder.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;
namespace sg = mlir::smla_gpu;

FragmentPlace mlir::smla::fragmentPlace(OpBuilder &b, Location loc) {
  Mma m{b, loc};
  Value tid = m.rem(gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x),
                    sg::kWarpgroupThreads);
  Value warp = m.div(tid, 32), lane = m.rem(tid, 32);
  Value r0 = m.add(m.mul(warp, 16), m.div(lane, 4));
  return {r0, m.add(r0, 8), m.rem(lane, 4)};
}

namespace {
/// Element i's row and column.
std::pair<Value, Value> elementAt(Mma &m, const FragmentPlace &p, int64_t i) {
  Value row = (i % 4) < 2 ? p.r0 : p.r1;
  Value col = m.add(m.mul(p.quad, 2), 8 * (i / 4) + (i % 2));
  return {row, col};
}

Value fromElements(OpBuilder &b, Location loc, VectorType type,
                   ArrayRef<Value> elems) {
  return vector::FromElementsOp::create(b, loc, type, elems);
}

SmallVector<Value> elementsOf(OpBuilder &b, Location loc, Value vec) {
  SmallVector<Value> out;
  int64_t n = cast<VectorType>(vec.getType()).getNumElements();
  for (int64_t i = 0; i < n; ++i)
    out.push_back(vector::ExtractOp::create(b, loc, vec, i));
  return out;
}

struct LowerFragmentRows : OpRewritePattern<sg::FragmentRowsOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::FragmentRowsOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    FragmentPlace p = fragmentPlace(rw, loc);
    Value v0 = memref::LoadOp::create(rw, loc, op.getValues(), p.r0);
    Value v1 = memref::LoadOp::create(rw, loc, op.getValues(), p.r1);
    SmallVector<Value> elems;
    for (int64_t i = 0; i < op.getType().getNumElements(); ++i)
      elems.push_back(i % 4 < 2 ? v0 : v1);
    rw.replaceOp(op, fromElements(rw, loc, op.getType(), elems));
    return success();
  }
};

struct LowerFragmentColumns : OpRewritePattern<sg::FragmentColumnsOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::FragmentColumnsOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Mma m{rw, loc};
    FragmentPlace p = fragmentPlace(rw, loc);
    SmallVector<Value> elems;
    for (int64_t i = 0; i < op.getType().getNumElements(); ++i) {
      if (i % 4 >= 2) { // same columns as elements 4 (i / 4) + {0, 1}
        elems.push_back(elems[i - 2]);
        continue;
      }
      Value col = elementAt(m, p, i).second;
      elems.push_back(memref::LoadOp::create(rw, loc, op.getValues(), col));
    }
    rw.replaceOp(op, fromElements(rw, loc, op.getType(), elems));
    return success();
  }
};

/// The transposed store by `stmatrix.m8n8.x4.trans`. Each n8 column
/// group i of a warp's 16 fragment rows is two 8 x 8 matrices (rows 16 w
/// .. + 7 and 16 w + 8 .. + 15), whose elements this thread holds as one
/// bf16 pair each, exactly stmatrix's per-thread share of a matrix.
/// Stored transposed, row b of matrix (i, h) is tile row 8 i + b, columns
/// 16 w + 8 h .. + 7: one 16-byte chunk of the swizzled row, whose
/// address lane 8 j + b of the x4 instruction that stores it as its
/// matrix j gives. One instruction per 16 fragment columns instead of two
/// scalar stores per element (and their addresses, which spilled).
void storeTransposed(PatternRewriter &rw, sg::StoreFragmentOp op,
                     ArrayRef<Value> elems) {
  Location loc = op.getLoc();
  Mma m{rw, loc};
  int64_t rows = op.getTile().getType().getDimSize(0);
  Value tid = m.rem(gpu::ThreadIdOp::create(rw, loc, gpu::Dimension::x),
                    sg::kWarpgroupThreads);
  Value warp = m.div(tid, 32), lane = m.rem(tid, 32);
  Value j = m.div(lane, 8), b = m.rem(lane, 8);
  Value base = m.base(flatTile(rw, loc, op.getTile()));
  auto v2 = VectorType::get({2}, rw.getF32Type());
  auto pack = [&](int64_t e) {
    return m.packBf16(fromElements(rw, loc, v2, {elems[e], elems[e + 1]}));
  };
  // This lane's matrix within an x4: column group 2 x + j / 2, half j % 2.
  Value col = m.add(m.add(m.mul(warp, 16), m.mul(m.rem(j, 2), 8)),
                    op.getCol());
  int64_t groups = static_cast<int64_t>(elems.size()) / 4;
  for (int64_t x = 0; x < groups / 2; ++x) {
    Value row = m.add(m.add(m.mul(m.add(m.div(j, 2), 2 * x), 8), b),
                      op.getRow());
    Value at = m.mul(swizzledOffset(rw, loc, rows, row, col), 2);
    SmallVector<Value> regs{pack(8 * x), pack(8 * x + 2), pack(8 * x + 4),
                            pack(8 * x + 6)};
    NVVM::StMatrixOp::create(
        rw, loc, m.ptr(m.add(base, at), 3), regs, NVVM::MMALayout::col,
        NVVM::LdStMatrixShapeAttr::get(rw.getContext(), 8, 8),
        NVVM::LdStMatrixEltType::B16);
  }
}

struct LowerStoreFragment : OpRewritePattern<sg::StoreFragmentOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::StoreFragmentOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Mma m{rw, loc};
    FragmentPlace p = fragmentPlace(rw, loc);
    MemRefType tile = op.getTile().getType();
    int64_t rows = tile.getDimSize(0);
    SmallVector<Value> elems = elementsOf(rw, loc, op.getFragment());
    if (op.getTranspose()) {
      storeTransposed(rw, op, elems);
      rw.eraseOp(op);
      return success();
    }
    Value flat = flatTile(rw, loc, op.getTile());
    Type bf16 = rw.getBF16Type();
    for (int64_t i = 0; i < static_cast<int64_t>(elems.size()); i += 2) {
      auto [r, c] = elementAt(m, p, i);
      // Columns c and c + 1 are neighbours in one 16-byte chunk.
      Value at = swizzledOffset(rw, loc, rows, m.add(r, op.getRow()),
                                m.add(c, op.getCol()));
      Value pair = arith::TruncFOp::create(
          rw, loc, VectorType::get({2}, bf16),
          fromElements(rw, loc, VectorType::get({2}, rw.getF32Type()),
                       {elems[i], elems[i + 1]}));
      vector::StoreOp::create(rw, loc, pair, flat, ValueRange{at});
    }
    rw.eraseOp(op);
    return success();
  }
};

struct LowerStoreRows : OpRewritePattern<sg::StoreRowsOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::StoreRowsOp op,
                                PatternRewriter &rw) const override {
    lowerStoreRows(rw, op, nullptr);
    rw.eraseOp(op);
    return success();
  }
};

struct LowerCount : OpRewritePattern<sg::CountOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::CountOp op,
                                PatternRewriter &rw) const override {
    SmallVector<Value> conds = elementsOf(rw, op.getLoc(), op.getPredicate());
    emitCounts(rw, op.getLoc(), op.getCounters(), op.getSlot(), conds);
    rw.eraseOp(op);
    return success();
  }
};

/// Lanes q and q ^ mask (q = l % 4) swap one f32 pair: returns what the
/// other lane sent (`send`, two values).
std::pair<Value, Value> swapPair(OpBuilder &b, Location loc, Value x, Value y,
                                 int64_t mask) {
  auto shfl = [&](Value v) {
    return gpu::ShuffleOp::create(b, loc, v, i32c(b, loc, mask),
                                  i32c(b, loc, 32), gpu::ShuffleMode::XOR)
        .getShuffleResult();
  };
  return {shfl(x), shfl(y)};
}

/// The reduction of a dKV fragment (rows = slots), each warp instruction
/// covering whole 128-byte lines of dKV rows (the layout the reductions
/// drain fastest in: bench/l2_floor.cu measures the half-line one).
///
/// 1. Within a quad (the 4 lanes of fragment row group gr), for a pair of
///    n8 tiles (A, B) and one of its rows, lane q holds column pairs A_q,
///    B_q; two swaps (lanes q ^ 2, then q ^ 1) leave lane q with the four
///    consecutive columns 4 q .. 4 q + 3 of the pair's 16: (A0 A1),
///    (A2 A3), (B0 B1), (B2 B3). Of a 32-column line (two tile pairs) a
///    lane then holds the 4-column chunks q and 4 + q.
/// 2. Quads gr and gr ^ 1 (lanes l and l ^ 4) hold rows g and g + 1 of the
///    same lines: the even quad sends its chunk 4 + q of row g, the odd
///    one its chunk q of row g + 1. Then one red.v4 per lane adds row g's
///    line (even lanes chunk q, odd lanes chunk 4 + q) and one adds row
///    g + 1's: 8 lanes per line, 4 lines per instruction.
struct LowerReduceDkv : OpRewritePattern<sg::ReduceDkvOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::ReduceDkvOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Mma m{rw, loc};
    FragmentPlace p = fragmentPlace(rw, loc);
    SmallVector<Value> d = elementsOf(rw, loc, op.getPartial());
    SmallVector<Value> slot = elementsOf(rw, loc, op.getSlots());
    int64_t tiles = static_cast<int64_t>(d.size()) / 4;
    if (tiles % 4)
      return rw.notifyMatchFailure(op, "needs whole 32-column lines");
    Value lane = m.rem(gpu::ThreadIdOp::create(rw, loc, gpu::Dimension::x), 32);
    Value low = m.lt(p.quad, 2);                          // q < 2
    Value even = m.lt(m.rem(p.quad, 2), 1);               // q % 2 == 0
    Value evenQuad = m.lt(m.rem(m.div(lane, 4), 2), 1);   // gr % 2 == 0
    Value zero32 = m.zeroI32();
    Value policy = emitEvictLastPolicy(rw, loc);
    // Step 1: per tile pair and half (row r0 or r1), this lane's chunk.
    auto chunk = [&](int64_t i, int64_t half) -> SmallVector<Value> {
      int64_t a = 4 * i + 2 * half, bt = 4 * (i + 1) + 2 * half;
      Value s0 = m.sel(low, d[bt], d[a]), s1 = m.sel(low, d[bt + 1], d[a + 1]);
      auto [r0, r1] = swapPair(rw, loc, s0, s1, 2);
      Value x0 = m.sel(low, d[a], r0), x1 = m.sel(low, d[a + 1], r1);
      Value y0 = m.sel(low, r0, d[bt]), y1 = m.sel(low, r1, d[bt + 1]);
      Value t0 = m.sel(even, y0, x0), t1 = m.sel(even, y1, x1);
      auto [u0, u1] = swapPair(rw, loc, t0, t1, 1);
      return {m.sel(even, x0, u0), m.sel(even, x1, u1), m.sel(even, u0, y0),
              m.sel(even, u1, y1)};
    };
    auto shfl4 = [&](Value v) {
      return gpu::ShuffleOp::create(rw, loc, v, i32c(rw, loc, 4),
                                    i32c(rw, loc, 32), gpu::ShuffleMode::XOR)
          .getShuffleResult();
    };
    for (int64_t half = 0; half < 2; ++half) {
      Value own = slot[2 * half];
      Value partner = shfl4(own);
      for (int64_t line = 0; line < tiles / 4; ++line) {
        SmallVector<Value> first = chunk(4 * line, half);      // chunk q
        SmallVector<Value> second = chunk(4 * line + 2, half); // chunk 4 + q
        // Step 2: the even quad sends its row's chunk 4 + q, the odd quad
        // its row's chunk q.
        SmallVector<Value> recv;
        for (int64_t k = 0; k < 4; ++k)
          recv.push_back(shfl4(m.sel(evenQuad, second[k], first[k])));
        Value col = m.add(m.add(m.mul(p.quad, 4),
                                m.sel(evenQuad, m.c(0), m.c(16))),
                          op.getCol() + 32 * line);
        auto red = [&](Value rowSlot, ArrayRef<Value> vals) {
          Value valid = arith::CmpIOp::create(
              rw, loc, arith::CmpIPredicate::sge, rowSlot, zero32);
          emitMaskedRed(rw, loc, op.getDkv(), op.getGroup(), valid, rowSlot,
                        col, vals, policy);
        };
        SmallVector<Value> rowG, rowG1;
        for (int64_t k = 0; k < 4; ++k) {
          rowG.push_back(m.sel(evenQuad, first[k], recv[k]));
          rowG1.push_back(m.sel(evenQuad, recv[k], second[k]));
        }
        // The even quad's row (g), then the odd quad's (g + 1).
        red(m.sel(evenQuad, own, partner), rowG);
        red(m.sel(evenQuad, partner, own), rowG1);
      }
    }
    rw.eraseOp(op);
    return success();
  }
};
} // namespace

void mlir::smla::lowerStoreRows(OpBuilder &rw, sg::StoreRowsOp op,
                                NonFiniteFlag *flag) {
  Location loc = op.getLoc();
  Mma m{rw, loc};
  FragmentPlace p = fragmentPlace(rw, loc);
  Type elem = op.getDest().getType().getElementType();
  SmallVector<Value> elems = elementsOf(rw, loc, op.getFragment());
  auto v2 = VectorType::get({2}, rw.getF32Type());
  for (int64_t i = 0; i < static_cast<int64_t>(elems.size()); i += 2) {
    auto [r, c] = elementAt(m, p, i);
    Value pair = fromElements(rw, loc, v2, {elems[i], elems[i + 1]});
    if (!elem.isF32())
      pair = arith::TruncFOp::create(rw, loc, VectorType::get({2}, elem),
                                     pair);
    if (flag)
      flag->add(rw, loc, pair);
    vector::StoreOp::create(rw, loc, pair, op.getDest(),
                            ValueRange{op.getToken(), m.add(op.getRow0(), r),
                                       m.add(c, op.getCol())});
  }
}

void mlir::smla::populateFragmentPatterns(RewritePatternSet &patterns) {
  patterns.add<LowerFragmentRows, LowerFragmentColumns, LowerStoreFragment,
               LowerStoreRows, LowerCount, LowerReduceDkv>(
      patterns.getContext());
}
