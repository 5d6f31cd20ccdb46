//===- LowerCopies.cpp - producer copies into swizzled tiles --------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// gather_keys, load_rows and write_slots, run by the 128 threads of a
// producer warpgroup. A team of 8 threads copies one row: member m takes
// the 16-byte chunk m of every 64-column slab, so a warp writes 4 rows x
// 128 bytes per instruction, each 128-byte line of a source row into one
// 128-byte line of the tile (no bank conflict). The gather's source row
// and size come from the slot's mask: select(mask, index, 0) and
// select(mask, 16, 0) bytes, so a masked slot zero-fills and its index
// never becomes an address.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAGPUToNVVM/SMLAGPUToNVVM.h"
#include "smla/Conversion/SMLAToNVVM/MmaBuilder.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;
namespace sg = mlir::smla_gpu;

namespace {
constexpr int64_t kTeam = 8;
constexpr int64_t kRowsPerRound = sg::kWarpgroupThreads / kTeam;

/// Issues, for every row r of a `rows` x `cols` tile, the cp.async of its
/// 8-element chunks from `source(b, r)` = (memref, indices of the row's
/// first element, source element count: 8, or 0 to zero-fill).
void copyRows(OpBuilder &b, Location loc, Value tid, Value tile,
              int64_t rows, int64_t cols,
              function_ref<std::tuple<Value, SmallVector<Value>, Value>(
                  OpBuilder &, Value)>
                  source) {
  Mma m{b, loc};
  Value flat = flatTile(b, loc, tile);
  Value member = m.rem(tid, kTeam), first = m.div(tid, kTeam);
  auto token = nvgpu::DeviceAsyncTokenType::get(b.getContext());
  scf::ForOp::create(
      b, loc, first, m.c(rows), m.c(kRowsPerRound), ValueRange{},
      [&](OpBuilder &rb, Location, Value r, ValueRange) {
        Mma rm{rb, loc};
        auto [src, at, count] = source(rb, r);
        for (int64_t slab = 0; slab < cols / sg::kSlabColumns; ++slab) {
          Value col = rm.add(rm.mul(member, 8), slab * sg::kSlabColumns);
          Value dst = swizzledOffset(rb, loc, rows, r, col);
          SmallVector<Value> srcIdx(at);
          srcIdx.back() = rm.add(srcIdx.back(), col);
          nvgpu::DeviceAsyncCopyOp::create(rb, loc, token, flat,
                                           ValueRange{dst}, src, srcIdx,
                                           rb.getIndexAttr(8), count,
                                           rb.getUnitAttr());
        }
        scf::YieldOp::create(rb, loc);
      });
}

Value warpgroupThread(OpBuilder &b, Location loc) {
  Mma m{b, loc};
  return m.rem(gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x),
               sg::kWarpgroupThreads);
}

struct LowerLoadRows : OpRewritePattern<sg::LoadRowsOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::LoadRowsOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    MemRefType tile = op.getTile().getType();
    int64_t width = op.getSource().getType().getDimSize(2);
    Value tid = warpgroupThread(rw, loc);
    copyRows(rw, loc, tid, op.getTile(), tile.getDimSize(0), width,
             [&](OpBuilder &b, Value r) {
               Mma m{b, loc};
               SmallVector<Value> at{op.getToken(), m.add(op.getRow0(), r),
                                     m.c(0)};
               return std::make_tuple(op.getSource(), at, m.c(8));
             });
    rw.eraseOp(op);
    return success();
  }
};
} // namespace

Value mlir::smla::swizzledOffset(OpBuilder &b, Location loc, int64_t rows,
                                 Value row, Value col) {
  Mma m{b, loc};
  Value slab = m.div(col, sg::kSlabColumns);
  Value inSlab = m.rem(col, sg::kSlabColumns);
  Value chunk = arith::XOrIOp::create(b, loc, m.div(inSlab, 8), m.rem(row, 8));
  return m.add(m.add(m.mul(slab, rows * sg::kSlabColumns),
                     m.mul(row, sg::kSlabColumns)),
               m.add(m.mul(chunk, 8), m.rem(inSlab, 8)));
}

Value mlir::smla::flatTile(OpBuilder &b, Location loc, Value tile) {
  auto type = cast<MemRefType>(tile.getType());
  int64_t elems = type.getNumElements();
  auto flat = MemRefType::get({elems}, type.getElementType(),
                              MemRefLayoutAttrInterface{},
                              type.getMemorySpace());
  return memref::ReinterpretCastOp::create(b, loc, flat, tile, 0,
                                           ArrayRef<int64_t>{elems},
                                           ArrayRef<int64_t>{1});
}

LogicalResult mlir::smla::lowerGatherKeys(CtaEmitter &e,
                                          sg::GatherKeysOp op,
                                          const LaneFn &mask,
                                          const LaneFn &index) {
  if (e.threads != sg::kWarpgroupThreads)
    return op.emitOpError() << "is lowered by one warpgroup";
  MemRefType tile = op.getTile().getType();
  int64_t width = op.getKv().getType().getDimSize(2);
  copyRows(e.b, e.loc, e.tid, op.getTile(), tile.getDimSize(0), width,
           [&](OpBuilder &b, Value r) {
             Mma m{b, e.loc};
             Value valid = mask(b, e.loc, r);
             Value raw = index(b, e.loc, r);
             Value row = arith::IndexCastOp::create(
                 b, e.loc, b.getIndexType(),
                 m.sel(valid, raw, m.zeroI32()));
             SmallVector<Value> at{row, op.getGroup(), m.c(0)};
             return std::make_tuple(op.getKv(), at,
                                    m.sel(valid, m.c(8), m.c(0)));
           });
  return success();
}

LogicalResult mlir::smla::lowerWriteSlots(CtaEmitter &e,
                                          sg::WriteSlotsOp op,
                                          const LaneMap &lanes) {
  int64_t n = op.getIndices().getType().getNumElements();
  SmallVector<Value> read{op.getIndices()};
  llvm::append_range(read, op.getMasks());
  for (Value v : read)
    if (!lanes.count(v))
      return op.emitOpError() << "reads a lane vector with no lane function";
  e.ctaLoop(n, [&](OpBuilder &b, Value j) {
    Location loc = e.loc;
    Mma m{b, loc};
    Value ok = lanes.lookup(op.getMasks().front())(b, loc, j);
    for (Value mk : op.getMasks().drop_front())
      ok = arith::AndIOp::create(b, loc, ok, lanes.lookup(mk)(b, loc, j));
    Value idx = lanes.lookup(op.getIndices())(b, loc, j);
    Value none = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(-1));
    memref::StoreOp::create(b, loc, m.sel(ok, idx, none), op.getSlots(),
                            ValueRange{j});
  });
  return success();
}

void mlir::smla::populateCopyPatterns(RewritePatternSet &patterns) {
  patterns.add<LowerLoadRows>(patterns.getContext());
}
