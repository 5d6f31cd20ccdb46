//===- LowerGather.cpp - the masked key gather ---------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// smla.gather as cp.async copies of 16 bytes whose row and source size are
// both selected by the mask: an invalid slot reads row 0 with size 0, so
// cp.async writes zeros and its index never becomes an address.
//
// Two destination layouts. The row-major key tile (rows padded by 16
// bytes, smla-gpu-map). And the key tile that smla-defer-scatter lays out
// for wgmma (kSwizzledKeysAttr): 64-column slabs of 8 KB, in each 8-key
// groups of 1 KB, key j % 8 at 128 (j % 8) and its 16-byte chunk k at
// 16 (k ^ (j % 8)). The block products read that tile K-major (A of S^T,
// dP^T), dq_packed MN-major (A of dQ^T), both with the 128-byte swizzle.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"
#include "smla/Conversion/SMLAToNVVM/MmaBuilder.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;

bool mlir::smla::swizzledKeys(Value memref) {
  auto cast = memref.getDefiningOp<memref::ReinterpretCastOp>();
  return cast && cast->hasAttr(kSwizzledKeysAttr);
}

namespace {
/// Closes the copies as one cp.async group; a whole gather (not
/// issue_only) waits for it, and before wgmma reads a swizzled tile
/// through the async proxy, fences it.
void finishCopies(CtaEmitter &e, GatherOp op, bool swizzled) {
  Value group = nvgpu::DeviceAsyncCreateGroupOp::create(
      e.b, e.loc, nvgpu::DeviceAsyncTokenType::get(e.b.getContext()),
      ValueRange{});
  if (op.getIssueOnly())
    return;
  nvgpu::DeviceAsyncWaitOp::create(e.b, e.loc, group,
                                   e.b.getI32IntegerAttr(0));
  if (swizzled)
    emitProxyFence(e.b, e.loc);
}

/// The row-major tile. A team of `team` consecutive threads (the largest
/// power of two with team * rows <= threads) copies one row: its index
/// lane and mask are evaluated once per row, not once per 16-byte chunk,
/// and the team's lanes take consecutive chunks (at 512 threads and 64
/// rows a warp reads 4 rows x 128 contiguous bytes per instruction).
void rowMajorGather(CtaEmitter &e, GatherOp op, const LaneFn &mask,
                    const LaneFn &index, int64_t rows, int64_t chunks) {
  Value kv = op.getKv(), g = op.getGroup(), dst = op.getTile();
  int64_t team = 1;
  while (team * 2 * rows <= e.threads && e.threads % (team * 2) == 0 &&
         team * 2 <= chunks)
    team *= 2;
  Location loc = e.loc;
  OpBuilder &ob = e.b;
  auto cI = [&](OpBuilder &b, int64_t v) {
    return arith::ConstantIndexOp::create(b, loc, v).getResult();
  };
  Value first = arith::DivUIOp::create(ob, loc, e.tid, cI(ob, team));
  Value member = arith::RemUIOp::create(ob, loc, e.tid, cI(ob, team));
  scf::ForOp::create(
      ob, loc, first, cI(ob, rows), cI(ob, e.threads / team), ValueRange{},
      [&](OpBuilder &b, Location, Value r, ValueRange) {
        Value valid = mask(b, loc, r);
        Value raw = index(b, loc, r);
        Value zero32 =
            arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0));
        Value safe = arith::SelectOp::create(b, loc, valid, raw, zero32);
        Value row = arith::IndexCastOp::create(b, loc, b.getIndexType(), safe);
        Value count =
            arith::SelectOp::create(b, loc, valid, cI(b, 8), cI(b, 0));
        scf::ForOp::create(
            b, loc, member, cI(b, chunks), cI(b, team), ValueRange{},
            [&](OpBuilder &ib, Location, Value c, ValueRange) {
              Value col = arith::MulIOp::create(ib, loc, c, cI(ib, 8));
              nvgpu::DeviceAsyncCopyOp::create(
                  ib, loc, nvgpu::DeviceAsyncTokenType::get(ib.getContext()),
                  dst, ValueRange{r, col}, kv, ValueRange{row, g, col},
                  ib.getIndexAttr(8), count, ib.getUnitAttr());
              scf::YieldOp::create(ib, loc);
            });
        scf::YieldOp::create(b, loc);
      });
}

/// The gather into the swizzled key tile (swizzledKeys): a team of 8
/// threads per row, member m copying chunks m, m + 8, ..., i.e. the
/// 16-byte chunk m of each 64-column slab, to slab * 8 KB + (r / 8) KB +
/// 128 (r % 8) + 16 (m ^ (r % 8)). A warp copies 4 rows x 128 bytes per
/// instruction, each 128-byte line of a kv row into one 128-byte line of
/// the tile: no bank conflict, one shared-memory fill per line (the
/// unswizzled canonical layout spreads each line over 8 and measured
/// 2.2 ms slower on B2, `bench/bench_bwd.py --shapes B2`).
LogicalResult swizzledGather(CtaEmitter &e, GatherOp op, const LaneFn &mask,
                             const LaneFn &index, int64_t rows,
                             int64_t chunks) {
  constexpr int64_t team = 8;
  if (rows % 8 || e.threads != team * rows || chunks % team)
    return op.emitOpError() << "GPU gather into the swizzled key tile "
                               "needs 8 threads per row and 64-column slabs";
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Mma m{b, loc};
  auto source = op.getTile().getDefiningOp<memref::ReinterpretCastOp>();
  int64_t elems = rows * chunks * 8;
  auto flat = MemRefType::get({elems}, b.getBF16Type(),
                              StridedLayoutAttr::get(b.getContext(), 0, {1}),
                              op.getTile().getType().getMemorySpace());
  Value dst = memref::ReinterpretCastOp::create(
      b, loc, flat, source.getSource(), 0, ArrayRef<int64_t>{elems},
      ArrayRef<int64_t>{1});
  Value r = m.div(e.tid, team), member = m.rem(e.tid, team);
  Value valid = mask(b, loc, r);
  Value raw = index(b, loc, r);
  Value safe = m.sel(valid, raw, m.zeroI32());
  Value row = arith::IndexCastOp::create(b, loc, b.getIndexType(), safe);
  Value count = m.sel(valid, m.c(8), m.c(0));
  Value kv = op.getKv(), g = op.getGroup();
  // Elements: row r's place in its slab, then its chunk.
  Value rLo = m.rem(r, 8);
  Value inSlab = m.add(m.add(m.mul(m.div(r, 8), 512), m.mul(rLo, 64)),
                       m.mul(arith::XOrIOp::create(b, loc, member, rLo), 8));
  scf::ForOp::create(b, loc, m.c(0), m.c(chunks / team), m.c(1), ValueRange{},
                     [&](OpBuilder &ib, Location, Value slab, ValueRange) {
                       Mma im{ib, loc};
                       Value col = im.add(im.mul(slab, 64), im.mul(member, 8));
                       Value at = im.add(im.mul(slab, rows * 64), inSlab);
                       nvgpu::DeviceAsyncCopyOp::create(
                           ib, loc,
                           nvgpu::DeviceAsyncTokenType::get(ib.getContext()),
                           dst, ValueRange{at}, kv, ValueRange{row, g, col},
                           ib.getIndexAttr(8), count, ib.getUnitAttr());
                       scf::YieldOp::create(ib, loc);
                     });
  return success();
}

} // namespace

LogicalResult mlir::smla::lowerGather(CtaEmitter &e, GatherOp op,
                                      const LaneFn &mask,
                                      const LaneFn &index) {
  bool swizzled = swizzledKeys(op.getTile());
  // The second half of a split gather (smla-prefetch-keys): every thread
  // waits for the copies it issued; the barrier after it (Barriers.cpp:
  // the op writes the tile) makes them visible to all.
  if (op.getWaitOnly()) {
    NVVM::CpAsyncWaitGroupOp::create(e.b, e.loc, 0);
    if (swizzled)
      emitProxyFence(e.b, e.loc);
    return success();
  }
  MemRefType tile = op.getTile().getType();
  int64_t width = op.getKv().getType().getDimSize(2);
  if (!tile.getElementType().isBF16() || width % 8 || tile.getDimSize(1) % 8)
    return op.emitOpError() << "GPU gather needs a bf16 tile and kv rows "
                               "whose widths are multiples of 8";
  int64_t rows = tile.getDimSize(0), chunks = width / 8;
  if (swizzled) {
    if (failed(swizzledGather(e, op, mask, index, rows, chunks)))
      return failure();
  } else {
    rowMajorGather(e, op, mask, index, rows, chunks);
  }
  finishCopies(e, op, swizzled);
  return success();
}
