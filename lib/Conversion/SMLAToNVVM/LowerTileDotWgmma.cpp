//===- LowerTileDotWgmma.cpp - the block products on wgmma ----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//   tile_dot x 2   S[h, j] = sum_c q[h, c] k[j, c]      (c < W)
//                  dP[h, j] = sum_c do[h, c] k[j, c]    (c < D)
//
// The form for a 32-row CTA at block 64 on 512 threads whose q and do rows
// are the canonical [q; do] tile (StageTokenRows.cpp): both products as
// the transposed S^T = K [q; do]^T, one m64n64k16 wgmma chain in warpgroup
// 0 (M = the 64 keys, N = the 64 rows of [q; do], K = the columns; do is
// zero past D, so one chain gives both) and, for the rope tail of q, an
// m64n32k16 chain on the q rows. A, the keys, from registers: each warp's
// 16 keys by ldmatrix.x4 out of the row-major padded key tile (which the
// gather, dQ and the scatter keep using); B, the [q; do] tile, K-major
// (LBO 1024, SBO 128). The k steps run in groups of 4: ldmatrix, fence,
// 4 wgmma, commit, wait 0 before the group's registers are reused. Each
// thread then stores its accumulators, keys 16 (warp % 4) + lane / 4 and
// 8 more by rows 8 i + 2 (lane % 4) + {0, 1} of [q; do], into the S and dP
// tiles. Probe (bench/wgmma.cu, wg1r): 1.35 us per block against 2.08 for
// the mma.sync form. The other warpgroups wait at the barrier after it,
// or, with the step's last dKV chunk (or two) alongside (kOverlapRunAttr),
// run it.
//
// With the key tile swizzled (smla-defer-scatter, swizzledKeys) A comes
// from shared memory too: K-major with 128-byte swizzle, SBO 1024 (8-key
// groups), k step s at slab s / 4 plus 32 (s % 4) bytes, and all k steps
// in one commit group. Split over two warpgroups (S^T and dP^T, n32 each)
// it measured 0.3 ms slower on B2 and B3 (`bench/bench_bwd.py --shapes B2
// B3`).
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"
#include "smla/Conversion/SMLAToNVVM/Wgmma.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;

namespace mlir::smla {

namespace {
constexpr int64_t kKeys = 64, kGroup = 4;
} // namespace

bool canUseWgmmaDots(TileDotOp first, TileDotOp second, int64_t threads) {
  TileDotOp q = first, dout = second;
  if (canonicalRow(q.getLhs()) != 0)
    std::swap(q, dout);
  auto res = q.getResult().getType();
  int64_t w = staticDim(q.getLhs(), 2), d = staticDim(dout.getLhs(), 2);
  int64_t tileW = staticDim(q.getTile(), 1);
  return threads == 512 && canonicalRow(q.getLhs()) == 0 &&
         canonicalRow(dout.getLhs()) == kCanonicalHalf &&
         res.getDimSize(0) == kCanonicalHalf && res.getDimSize(1) == kKeys &&
         dout.getResult().getType().getShape() == res.getShape() &&
         q.getTile() == dout.getTile() && tileW % 8 == 0 &&
         w % (16 * kGroup) == 0 && d % (16 * kGroup) == 0 && d <= w;
}

void lowerTileDotPairWgmma(CtaEmitter &e, TileDotOp first, TileDotOp second,
                           const ProductsEpilogue *epilogue) {
  TileDotOp q = first, dout = second;
  if (canonicalRow(q.getLhs()) != 0)
    std::swap(q, dout);
  bool swizzled = swizzledKeys(q.getTile());
  Mma m{e.b, e.loc};
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t w = staticDim(q.getLhs(), 2), d = staticDim(dout.getLhs(), 2);
  int64_t tileW = staticDim(q.getTile(), 1);
  WarpLane wl = m.warpLane(e.tid);
  Value w4 = m.rem(wl.warp, 4);
  Value tileBase = m.base(q.getTile());
  Value qdo = m.base(q.getLhs());

  scf::IfOp::create(b, loc, m.lt(wl.warp, 4), [&](OpBuilder &nb, Location l) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
    // This lane's ldmatrix row: key 16 w4 + lane % 16, column 8 (lane / 16).
    Value aRow = m.add(
        tileBase,
        m.mul(m.add(m.mul(m.add(m.mul(w4, 16), m.rem(wl.lane, 16)), tileW),
                    m.mul(m.div(wl.lane, 16), 8)),
              2));
    // Computed in the block loop, not hoisted out of it (Wgmma.h).
    aRow = wgmma::launder(m, aRow);
    Value descB = wgmma::descriptor(m, wgmma::launder(m, qdo),
                                    2 * kCanonicalHalf * 16, 128);
    Value descA =
        swizzled ? wgmma::descriptor(m, wgmma::launder(m, tileBase), 16, 1024,
                                     /*swizzle128=*/true)
                 : Value();
    Value j0, j1;
    if (epilogue) {
      j0 = m.add(m.mul(w4, 16), wl.gr);
      j1 = m.add(j0, 8);
      epilogue->before(b, loc, j0, j1, wl.kq);
    }
    int64_t groups = w / 16 / kGroup;
    SmallVector<Value> acc;
    for (int64_t g = 0; g < groups; ++g) {
      SmallVector<SmallVector<Value>> a(kGroup);
      if (!swizzled)
        for (int64_t i = 0; i < kGroup; ++i)
          a[i] = m.ldmatrix(m.add(aRow, 32 * (kGroup * g + i)), 4, false);
      if (!swizzled || g == 0)
        wgmma::fence(b, loc);
      for (int64_t i = 0; i < kGroup; ++i) {
        int64_t s = kGroup * g + i;
        Value bs = wgmma::advance(m, descB, s * 2 * kCanonicalHalf * 2 * 16);
        Value as = swizzled ? wgmma::advance(m, descA,
                                             s / 4 * kSwizzleSlab + s % 4 * 32)
                            : Value();
        if (s < d / 16) {
          acc = wgmma::mmaAsync(m, 64, a[i], as, bs, false, acc);
        } else {
          // The rope tail: the q rows (N 0-31) alone.
          SmallVector<Value> lo =
              wgmma::mmaAsync(m, 32, a[i], as, bs, false,
                              ValueRange(acc).take_front(kCanonicalHalf / 2));
          std::copy(lo.begin(), lo.end(), acc.begin());
        }
      }
      // Registers A: wait before the next group's ldmatrix reuses them.
      if (!swizzled || g == groups - 1) {
        wgmma::commit(b, loc);
        wgmma::wait(b, loc, 0);
      }
    }
    // acc[4 i + {0, 1}]: key j0, rows 8 i + kq + {0, 1} of [q; do];
    // acc[4 i + {2, 3}]: key j1.
    if (epilogue) {
      epilogue->after(b, loc, acc);
      scf::YieldOp::create(b, l);
      return;
    }
    j0 = m.add(m.mul(w4, 16), wl.gr);
    j1 = m.add(j0, 8);
    for (int64_t i = 0; i < 8; ++i) {
      Value tile = i < 4 ? q.getResult() : dout.getResult();
      Value row = m.add(m.c(8 * (i % 4)), wl.kq);
      Value row1 = m.add(row, 1);
      memref::StoreOp::create(b, loc, acc[4 * i], tile, ValueRange{row, j0});
      memref::StoreOp::create(b, loc, acc[4 * i + 1], tile,
                              ValueRange{row1, j0});
      memref::StoreOp::create(b, loc, acc[4 * i + 2], tile,
                              ValueRange{row, j1});
      memref::StoreOp::create(b, loc, acc[4 * i + 3], tile,
                              ValueRange{row1, j1});
    }
    scf::YieldOp::create(b, l);
  });
}

} // namespace mlir::smla
