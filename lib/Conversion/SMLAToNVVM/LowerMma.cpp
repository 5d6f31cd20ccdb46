//===- LowerMma.cpp - tile_dot on tensor cores ----------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Both block products as warp-level nvvm.mma.sync m16n8k16 (bf16 x bf16,
// f32 accumulators), the heads as M, padded to a multiple of 16:
//
//   tile_dot       C[h, j] = sum_c lhs[t, hb*Hb + h, c] * tile[j, c]
//                  A = lhs rows (ldmatrix.x4 when staged in shared
//                  memory, else 32-bit loads of bf16 pairs),
//                  B = key rows (shared, ldmatrix.x2; the "col" layout
//                  is the tile rows as they are stored).
//
// dq_accumulate is in LowerDqMma.cpp, scatter_dkv in LowerScatterMma.cpp,
// the shared helpers and the fragment layout in MmaBuilder.h.
//
// Padded head rows (h >= Hg) never form an address outside this token's
// rows: their loads go to row 0 of the head block and are replaced by
// zero, and their results are never stored.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/MmaBuilder.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;

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
  if (canUseWgmmaDots(first, second, e.threads)) {
    lowerTileDotPairWgmma(e, first, second);
    return;
  }
  lowerTileDotPairMma(e, first, second);
}

namespace {
/// The A side of a tile_dot: its rows (global or staged), the element
/// offset of head hb*Hb of token t in them, its width and its result.
struct DotLhs {
  Value base, rowBase, result;
  Rows rows;
  int64_t width;
  /// The first row of the lhs in the canonical [q; do] tile, if staged so.
  std::optional<int64_t> canonical;
};

DotLhs dotLhs(Mma &m, TileDotOp op, int64_t hg) {
  DotLhs l;
  l.base = m.base(op.getLhs());
  l.canonical = canonicalRow(op.getLhs());
  l.rows = rowsOf(op.getLhs());
  l.rowBase = m.add(m.mul(op.getToken(), l.rows.tokenStride),
                    m.mul(m.mul(op.getHeadBlock(), hg), l.rows.rowStride));
  l.result = op.getResult();
  l.width = staticDim(op.getLhs(), 2);
  return l;
}
} // namespace

/// S = Q.K^T or dP = dO.V^T (`ops` has one tile_dot), or both block
/// products of a top-k block in one pass (`ops` has two on the same key
/// tile, token and head block: V is the first D columns of the keys). A
/// warp takes (m tile, n8 tile) items, or (m tile, 16 keys) items where
/// the former fit in one round of the warps (below); per k step of 16 it
/// loads its key fragment once and runs one mma per product. Two products give two
/// independent mma chains (which hides mma latency); a lone product gets
/// them from even and odd k steps. Over the columns only the wider product
/// reads (the rope tail of q), it runs alone.
void lowerTileDotsMma(CtaEmitter &e, ArrayRef<TileDotOp> ops) {
  Mma m{e.b, e.loc};
  TileDotOp first = ops.front();
  auto resType = first.getResult().getType();
  int64_t hg = resType.getDimSize(0), block = resType.getDimSize(1);
  int64_t tileW = staticDim(first.getTile(), 1);
  int64_t mTiles = llvm::divideCeil(hg, 16), nTiles = block / 8;
  int64_t warps = e.threads / kMmaLanes;

  WarpLane w = m.warpLane(e.tid);
  Value warp = w.warp, gr = w.gr, kq = w.kq;
  Value tileBase = m.base(first.getTile());
  SmallVector<DotLhs, 2> lhs;
  for (TileDotOp op : ops)
    lhs.push_back(dotLhs(m, op, hg));
  if (lhs.size() == 2 && lhs[0].width < lhs[1].width)
    std::swap(lhs[0], lhs[1]);

  // ldmatrix needs shared rows at 16-byte aligned addresses: a lhs staged
  // in shared memory and the key tile, with row strides of 8 elements.
  auto ldmatrixOk = [&](const DotLhs &l) {
    return l.rows.addressSpace == 3 && l.rows.rowStride % 8 == 0 &&
           l.rows.tokenStride % 8 == 0;
  };
  bool bLd = tileW % 8 == 0;
  // ldmatrix lanes: lane l addresses row l % 16 of the m tile at column
  // 8 (l / 16) (A, .x4), or key row l % 8 at column 8 ((l / 8) % 2) (B, .x2).
  Value lane = w.lane;
  Value ldARow = m.rem(lane, 16), ldACol = m.mul(m.div(lane, 16), 8);
  Value ldBRow = m.rem(lane, 8), ldBCol = m.mul(m.rem(m.div(lane, 8), 2), 8);

  // Both products, at least 4 (m tile, 16 keys) items, and (m tile, n
  // tile) items that all fit in one round of the warps (the 32-head CTA
  // at block 32 or 64: 8 or 16 items for 16 warps): a warp takes two n
  // tiles, so each A fragment it loads serves two mma per product. That
  // halves the A traffic from shared memory, which bounds the phase, at
  // the price of idle warps in it (1.10x on B1's mma.sync kernel at block
  // 32, 1.09x at block 64, `bench/bench_bwd.py --shapes B1`), and gives
  // four accumulator chains per warp. The
  // 16 keys come from one ldmatrix.x4: lane l addresses key
  // l % 8 + 8 (l / 16) at column 8 ((l / 8) % 2), registers 0-1 the first
  // n tile, 2-3 the second.
  if (lhs.size() == 2 && bLd && nTiles % 2 == 0 &&
      mTiles * nTiles / 2 >= 4 && mTiles * nTiles <= warps &&
      llvm::all_of(lhs, ldmatrixOk)) {
    int64_t nPairs = nTiles / 2;
    Value bKey = m.add(ldBRow, m.mul(m.div(lane, 16), 8));
    m.warpLoop(warp, warps, mTiles * nPairs, [&](Value p) {
      Value mt = m.div(p, nPairs), n0 = m.mul(m.rem(p, nPairs), 16);
      FragRows fr = m.fragRows(mt, gr, hg);
      Value aRow = m.add(m.mul(mt, 16), ldARow);
      aRow = m.sel(m.lt(aRow, hg), aRow, m.c(0));
      SmallVector<Value> aAddr;
      for (const DotLhs &l : lhs) {
        if (l.canonical) {
          // Canonical [q; do] tile (StageTokenRows.cpp): row r, column c at
          // ((c / 8) * 8 + r / 8) * 128 + 16 (r % 8) + 2 (c % 8); an
          // ldmatrix row (8 columns) is 16 contiguous bytes.
          Value r = m.add(aRow, *l.canonical);
          aAddr.push_back(m.add(
              l.base, m.add(m.add(m.mul(m.div(ldACol, 8), kCanonicalStride),
                                  m.mul(m.div(r, 8), 128)),
                            m.mul(m.rem(r, 8), 16))));
          continue;
        }
        aAddr.push_back(m.add(
            l.base,
            m.mul(m.add(m.add(l.rowBase, m.mul(aRow, l.rows.rowStride)),
                        ldACol),
                  2)));
      }
      // Bytes per column of k for each lhs: 2 row-major, 128 canonical
      // (8 columns per core matrix column of 1024 bytes).
      auto aBytes = [&](size_t i, Value k) {
        return m.mul(k, lhs[i].canonical ? kCanonicalStride / 8 : 2);
      };
      Value bAddr = m.add(
          tileBase, m.mul(m.add(m.mul(m.add(n0, bKey), tileW), ldBCol), 2));
      Value z = m.zeroF32();
      // Accumulators: product i, n tile h at 4 (2 i + h).
      auto steps = [&](int64_t from, int64_t to, size_t products,
                       ValueRange init) {
        return m.reduce(to - from, 16, init,
                        [&](Value k, ValueRange c) -> SmallVector<Value> {
                          Value kAt = m.add(k, from);
                          Value kb = m.mul(kAt, 2);
                          SmallVector<Value> b =
                              m.ldmatrix(m.add(bAddr, kb), 4, false);
                          SmallVector<Value> out(c);
                          for (size_t i = 0; i < products; ++i) {
                            SmallVector<Value> a = m.ldmatrix(
                                m.add(aAddr[i], aBytes(i, kAt)), 4, false);
                            for (int64_t h = 0; h < 2; ++h) {
                              int64_t at = 4 * (2 * i + h);
                              SmallVector<Value> d =
                                  m.mma(a, {b[2 * h], b[2 * h + 1]},
                                        ValueRange(c).slice(at, 4));
                              std::copy(d.begin(), d.end(), out.begin() + at);
                            }
                          }
                          return out;
                        });
      };
      int64_t shared = lhs[1].width;
      SmallVector<Value> acc = steps(0, shared, 2, SmallVector<Value>(16, z));
      if (lhs[0].width > shared) {
        SmallVector<Value> tail = steps(shared, lhs[0].width, 1,
                                        ValueRange(acc).take_front(8));
        std::copy(tail.begin(), tail.end(), acc.begin());
      }
      for (size_t i = 0; i < 2; ++i)
        for (int64_t h = 0; h < 2; ++h) {
          int64_t at = 4 * (2 * i + h);
          Value col = m.add(m.add(n0, h * 8), kq);
          m.storePairIf(fr.ok0, lhs[i].result, fr.r0, col, acc[at],
                        acc[at + 1]);
          m.storePairIf(fr.ok1, lhs[i].result, fr.r1, col, acc[at + 2],
                        acc[at + 3]);
        }
    });
    return;
  }

  if (llvm::any_of(lhs, [](const DotLhs &l) { return l.canonical; }))
    llvm::report_fatal_error("smla: a canonical [q; do] tile reaches a "
                             "tile_dot lowering other than the fused pair");
  m.warpLoop(warp, warps, mTiles * nTiles, [&](Value p) {
    Value mt = m.div(p, nTiles), nt = m.rem(p, nTiles);
    FragRows fr = m.fragRows(mt, gr, hg);
    // The row this lane addresses for an A ldmatrix; rows past Hg read row
    // 0: they only feed C rows that are never stored.
    Value aRow = m.add(m.mul(mt, 16), ldARow);
    aRow = m.sel(m.lt(aRow, hg), aRow, m.c(0));
    // Per lhs, the byte addresses (k = 0) this lane reads its A fragment
    // from: the row it addresses for ldmatrix, or its pairs in rows r0 and
    // r1 for 32-bit loads.
    struct AAddr {
      bool ldmatrix;
      Value r0, r1;
    };
    SmallVector<AAddr> aAddr;
    for (const DotLhs &l : lhs) {
      auto addr = [&](Value row, Value col) {
        return m.add(l.base,
                     m.mul(m.add(m.add(l.rowBase, m.mul(row, l.rows.rowStride)),
                                 col),
                           2));
      };
      if (ldmatrixOk(l))
        aAddr.push_back({true, addr(aRow, ldACol), Value()});
      else
        aAddr.push_back({false, addr(fr.s0, kq), addr(fr.s1, kq)});
    }
    Value n = m.add(m.mul(nt, 8), bLd ? ldBRow : gr);
    Value bAddr = m.add(
        tileBase, m.mul(m.add(m.mul(n, tileW), bLd ? ldBCol : kq), 2));
    Value z = m.zeroF32(), zi = m.zeroI32();
    auto aFrag = [&](int i, Value kb) -> SmallVector<Value> {
      if (aAddr[i].ldmatrix)
        return m.ldmatrix(m.add(aAddr[i].r0, kb), 4, /*trans=*/false);
      unsigned as = lhs[i].rows.addressSpace;
      Value r0 = m.add(aAddr[i].r0, kb), r1 = m.add(aAddr[i].r1, kb);
      return {m.sel(fr.ok0, m.loadI32(r0, as), zi),
              m.sel(fr.ok1, m.loadI32(r1, as), zi),
              m.sel(fr.ok0, m.loadI32(m.add(r0, 16), as), zi),
              m.sel(fr.ok1, m.loadI32(m.add(r1, 16), as), zi)};
    };
    auto bFrag = [&](Value kb) -> SmallVector<Value> {
      if (bLd)
        return m.ldmatrix(m.add(bAddr, kb), 2, /*trans=*/false);
      return {m.loadI32(m.add(bAddr, kb), 3),
              m.loadI32(m.add(m.add(bAddr, kb), 16), 3)};
    };
    // acc += A[:, k..k+16) * B[k..k+16, :] for lhs 0 alone, from column k.
    auto step = [&](Value k, ValueRange c) -> SmallVector<Value> {
      Value kb = m.mul(k, 2);
      SmallVector<Value> a = aFrag(0, kb);
      return m.mma(a, bFrag(kb), c);
    };
    SmallVector<Value> acc;
    int64_t shared;
    if (lhs.size() == 2) {
      shared = lhs[1].width;
      acc = m.reduce(shared, 16, ValueRange{z, z, z, z, z, z, z, z},
                     [&](Value k, ValueRange c) -> SmallVector<Value> {
                       Value kb = m.mul(k, 2);
                       SmallVector<Value> b = bFrag(kb);
                       SmallVector<Value> out =
                           m.mma(aFrag(0, kb), b, c.take_front(4));
                       SmallVector<Value> two =
                           m.mma(aFrag(1, kb), b, c.drop_front(4));
                       out.append(two);
                       return out;
                     });
    } else {
      // Even and odd k steps in two accumulators, then summed.
      shared = lhs[0].width / 32 * 32;
      SmallVector<Value> both = m.reduce(
          shared, 32, ValueRange{z, z, z, z, z, z, z, z},
          [&](Value k, ValueRange c) -> SmallVector<Value> {
            SmallVector<Value> even = step(k, c.take_front(4));
            SmallVector<Value> odd = step(m.add(k, 16), c.drop_front(4));
            even.append(odd);
            return even;
          });
      for (int64_t i = 0; i < 4; ++i)
        acc.push_back(
            arith::AddFOp::create(m.b, m.loc, both[i], both[i + 4]));
    }
    if (lhs[0].width > shared) {
      SmallVector<Value> tail = m.reduce(
          lhs[0].width - shared, 16, ValueRange(acc).take_front(4),
          [&](Value k, ValueRange c) -> SmallVector<Value> {
            Value kb = m.mul(m.add(k, shared), 2);
            SmallVector<Value> b = bFrag(kb);
            return m.mma(aFrag(0, kb), b, c);
          });
      std::copy(tail.begin(), tail.end(), acc.begin());
    }
    Value col = m.add(m.mul(nt, 8), kq);
    for (size_t i = 0; i < lhs.size(); ++i) {
      m.storePairIf(fr.ok0, lhs[i].result, fr.r0, col, acc[4 * i],
                    acc[4 * i + 1]);
      m.storePairIf(fr.ok1, lhs[i].result, fr.r1, col, acc[4 * i + 2],
                    acc[4 * i + 3]);
    }
  });
}

void lowerTileDotMma(CtaEmitter &e, TileDotOp op) {
  lowerTileDotsMma(e, {op});
}

void lowerTileDotPairMma(CtaEmitter &e, TileDotOp first, TileDotOp second) {
  lowerTileDotsMma(e, {first, second});
}

} // namespace mlir::smla
