//===- LowerDqWgmma.cpp - dq_packed on wgmma ------------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//   dq_packed   acc[h, c] += sum_j packed[0, j, h] * tile[j, c]
//
// As dQ^T = K^T dS^T, one wgmma m64n32k16 chain of 4 k steps (the 64 keys)
// per 64-column tile: M = the tile's columns, A = slab t of the swizzled
// key tile read MN-major (transA, 128-byte swizzle, SBO 1024 between 8-key
// groups), N = the 32 rows, B = dS^T as pack_dkv packed it (slots x rows,
// rows contiguous: MN-major without swizzle, LBO 128, SBO 1024).
// Warpgroup w takes tiles w, w + 4, ...; a last tile left over when the
// tile count is 1 mod 4 (576 columns: 9 tiles) is split by rows, 8 w to
// 8 w + 7 in warpgroup w (m64n8k16), so every thread keeps 2 x 16 + 4 =
// 36 accumulators (the register form's 5 slots hold them).
//
// The accumulators live in the register form's private array across the
// block loop: tile i of a warpgroup at [16 i, 16 i + 16), the last tile's
// 4 after them. Thread (warp q of its warpgroup, lane l) holds, for n8 group
// g of a tile, columns 16 q + l / 4 (values 4 g, 4 g + 1) and 8 more
// (4 g + 2, 4 g + 3) at rows 8 g + 2 (l % 4) + {0, 1}.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"
#include "smla/Conversion/SMLAToNVVM/Wgmma.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;

namespace mlir::smla {

namespace {
constexpr int64_t kTile = 64, kKeys = 64, kWarpgroups = 4;

struct Shape {
  int64_t tiles, full; // 64-column tiles; full tiles per warpgroup
  bool last;           // a last tile split by rows over the warpgroups
};
Shape shapeOf(int64_t width) {
  int64_t tiles = width / kTile;
  return {tiles, tiles / kWarpgroups, tiles % kWarpgroups == 1};
}

/// The thread's place: warpgroup, warp in it, lane / 4, lane % 4.
struct Place {
  Value wg, wq, gr, kq;
};
Place placeOf(Mma &m, Value tid) {
  WarpLane w = m.warpLane(tid);
  return {m.div(w.warp, 4), m.rem(w.warp, 4), w.gr, w.kq};
}
} // namespace

int64_t dqPackedSlots(int64_t width) {
  if (width <= 0 || width % kTile)
    return 0;
  Shape s = shapeOf(width);
  if (s.tiles % kWarpgroups > 1)
    return 0;
  return 2 * s.full + (s.last ? 1 : 0);
}

void lowerDqPacked(CtaEmitter &e, DqPackedOp op, Value regs) {
  Mma m{e.b, e.loc};
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t width = staticDim(op.getAcc(), 1);
  Shape s = shapeOf(width);
  Place p = placeOf(m, e.tid);
  // Computed in the block loop, not hoisted out of it (Wgmma.h).
  Value keys = wgmma::launder(m, m.base(op.getTile()));
  Value ds = wgmma::launder(m, m.base(op.getPacked()));
  Value descB = wgmma::descriptor(m, ds, 128, 1024);
  // Tile t is slab t of the swizzled key tile, read MN-major: LBO the
  // slab stride (one slab per m64), SBO 1 KB between 8-key groups.
  auto descA = [&](Value tile) {
    return wgmma::descriptor(m, m.add(keys, m.mul(tile, kSwizzleSlab)),
                             kSwizzleSlab, 1024, /*swizzle128=*/true);
  };
  // k step k: keys 16 k.. (2 groups of 8: 2 KB of the slab, 256 bytes of
  // dS^T).
  auto chain = [&](int64_t n, Value a, Value bDesc, SmallVector<Value> acc) {
    for (int64_t k = 0; k < kKeys / 16; ++k)
      acc = wgmma::mmaAsync(m, n, ValueRange{}, wgmma::advance(m, a, 2048 * k),
                            wgmma::advance(m, bDesc, 256 * k), /*transB=*/true,
                            acc, /*transA=*/true);
    return acc;
  };

  SmallVector<SmallVector<Value>> acc(s.full);
  for (int64_t i = 0; i < s.full; ++i)
    for (int64_t r = 0; r < 16; ++r)
      acc[i].push_back(loadReg(b, loc, regs, 16 * i + r));
  SmallVector<Value> last;
  if (s.last)
    for (int64_t r = 0; r < 4; ++r)
      last.push_back(loadReg(b, loc, regs, 16 * s.full + r));

  wgmma::fence(b, loc);
  for (int64_t i = 0; i < s.full; ++i)
    acc[i] = chain(32, descA(m.add(p.wg, kWarpgroups * i)), descB, acc[i]);
  if (s.last) {
    // Rows 8 wg .. 8 wg + 7 of the last tile: the same code in every
    // warpgroup (a branch around wgmma serialises them, C7520).
    Value rows = wgmma::descriptor(m, m.add(ds, m.mul(p.wg, 1024)), 128, 1024);
    last = chain(8, descA(m.c(s.tiles - 1)), rows, last);
  }
  wgmma::commit(b, loc);
  wgmma::wait(b, loc, 0);
  for (int64_t i = 0; i < s.full; ++i)
    for (int64_t r = 0; r < 16; ++r)
      storeReg(b, loc, regs, 16 * i + r, acc[i][r]);
  for (int64_t r = 0; r < static_cast<int64_t>(last.size()); ++r)
    storeReg(b, loc, regs, 16 * s.full + r, last[r]);
}

void storeDqPackedRegisters(CtaEmitter &e, StoreDqOp op, Value regs,
                            NonFiniteFlag *flag) {
  Mma m{e.b, e.loc};
  OpBuilder &b = e.b;
  Location loc = e.loc;
  auto accType = op.getAcc().getType();
  int64_t hg = accType.getDimSize(0), width = accType.getDimSize(1);
  Shape s = shapeOf(width);
  Place p = placeOf(m, e.tid);
  Type elem = op.getDq().getType().getElementType();
  Value col0 = m.add(m.mul(p.wq, 16), p.gr);
  // Values at..at + 3 of n8 group g: (row, col), (row + 1, col), (row,
  // col + 8), (row + 1, col + 8), row = first + 8 g + 2 (lane % 4).
  auto store = [&](int64_t at, Value tile, Value first, int64_t groups) {
    Value col = m.add(m.mul(tile, kTile), col0);
    for (int64_t g = 0; g < groups; ++g) {
      Value row = m.add(m.add(first, 8 * g), p.kq);
      for (int64_t v = 0; v < 4; ++v) {
        Value x = loadReg(b, loc, regs, at + 4 * g + v);
        if (!elem.isF32())
          x = arith::TruncFOp::create(b, loc, elem, x);
        Value r = m.add(row, v % 2), c = m.add(col, 8 * (v / 2));
        Value head = headIndex(b, loc, op.getHeadBlock(), hg, r);
        memref::StoreOp::create(b, loc, x, op.getDq(),
                                ValueRange{op.getToken(), head, c});
        if (flag)
          flag->add(b, loc, x);
      }
    }
  };
  for (int64_t i = 0; i < s.full; ++i)
    store(16 * i, m.add(p.wg, kWarpgroups * i), m.c(0), 4);
  if (s.last)
    store(16 * s.full, m.c(s.tiles - 1), m.mul(p.wg, 8), 1);
}

} // namespace mlir::smla
