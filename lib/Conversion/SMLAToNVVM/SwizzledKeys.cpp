//===- SwizzledKeys.cpp - the key tile in wgmma's 128-byte swizzle --------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// smla-defer-scatter lays the key tile of a token-pair kernel out for
// wgmma (kSwizzledKeysAttr): 64-column slabs of 8 KB, in each 8-key groups
// of 1 KB, key j % 8 at 128 (j % 8) and its 16-byte chunk k at
// 16 (k ^ (j % 8)). The block products read it K-major (A of S^T, dP^T),
// dq_packed MN-major (A of dQ^T), both with the 128-byte swizzle mode.
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

namespace mlir::smla {

/// The gather into the swizzled key tile (swizzledKeys): a team of 8
/// threads per row, member m copying chunks m, m + 8, ..., i.e. the
/// 16-byte chunk m of each 64-column slab, to slab * 8 KB + (r / 8) KB +
/// 128 (r % 8) + 16 (m ^ (r % 8)). A warp copies 4 rows x 128 bytes per
/// instruction, each 128-byte line of a kv row into one 128-byte line of
/// the tile: no bank conflict, one shared-memory fill per line (the
/// unswizzled canonical layout spread each line over 8 and measured
/// 2.2 ms slower on B2).
LogicalResult lowerSwizzledGather(CtaEmitter &e, GatherOp op,
                                  const LaneFn &mask, const LaneFn &index) {
  constexpr int64_t team = 8;
  MemRefType tile = op.getTile().getType();
  int64_t width = op.getKv().getType().getDimSize(2);
  int64_t rows = tile.getDimSize(0), chunks = width / 8;
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
  // An invalid slot is never turned into an address: its row is 0 and
  // its source size 0, so cp.async writes 16 zero bytes.
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
  Value group = nvgpu::DeviceAsyncCreateGroupOp::create(
      b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), ValueRange{});
  if (!op.getIssueOnly()) {
    nvgpu::DeviceAsyncWaitOp::create(b, loc, group, b.getI32IntegerAttr(0));
    // wgmma reads the tile through the async proxy.
    emitProxyFence(b, loc);
  }
  return success();
}

} // namespace mlir::smla
