//===- StageTokenRows.cpp - q and do rows of a CTA in shared memory -------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Part of smla-gpu-map: the block products of every top-k block read the
// CTA's q and do rows; when they fit next to the tiles they are copied once
// into shared memory before the block loop.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

using namespace mlir;
using namespace mlir::smla;

/// Bytes of the workgroup allocas of `kernel`, each rounded up to 128, but
/// for the dQ accumulators marked for registers (kDqRegistersAttr).
static int64_t workgroupBytesUsed(gpu::GPUFuncOp kernel) {
  int64_t total = 0;
  kernel.walk([&](memref::AllocaOp a) {
    if (a->hasAttr(kDqRegistersAttr))
      return;
    MemRefType type = a.getType();
    int64_t bytes = type.getNumElements() *
                    llvm::divideCeil(type.getElementTypeBitWidth(), 8);
    total += llvm::alignTo(bytes, 128);
  });
  return total;
}

std::optional<int64_t> mlir::smla::canonicalRow(Value memref) {
  auto cast = memref.getDefiningOp<memref::ReinterpretCastOp>();
  if (!cast)
    return std::nullopt;
  auto row = cast->getAttrOfType<IntegerAttr>(kCanonicalRowAttr);
  if (!row)
    return std::nullopt;
  return row.getInt();
}

/// Whether `kernel` can stage q and do as one canonical [q; do] tile: its
/// scatter_dkv then takes the wgmma form (smla-defer-scatter,
/// LowerScatterWgmma.cpp) and its block products too
/// (LowerTileDotWgmma.cpp), which need a 32-row CTA at block 64 on 512
/// threads and q columns in chunks of 192 (48 per warpgroup).
static bool wantsCanonical(gpu::GPUFuncOp kernel, int64_t threads,
                           int64_t heads, int64_t w, int64_t d) {
  bool ok = false;
  kernel.walk([&](ScatterDkvOp op) {
    auto ds = op.getDs().getType();
    ok = ds.getDimSize(0) == kCanonicalHalf && ds.getDimSize(1) == 64;
  });
  return ok && threads == 512 && heads == kCanonicalHalf &&
         w % kWgmmaChunkColumns == 0 &&
         d % 16 == 0 && d <= w;
}

/// A 64-row canonical bf16 tile of `cols` columns in shared memory and the
/// cp.async destination view of it, [R / 8, 8, C / 8, 8] with strides
/// [64, 8, 8 R, 1].
static std::pair<memref::AllocaOp, Value>
allocCanonicalTile(OpBuilder &b, Location loc, int64_t cols) {
  MLIRContext *ctx = b.getContext();
  auto wgSpace = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  const int64_t rows = 2 * kCanonicalHalf, chunks = cols / 8;
  auto buffer = memref::AllocaOp::create(
      b, loc,
      MemRefType::get({rows, cols}, b.getBF16Type(),
                      MemRefLayoutAttrInterface{}, wgSpace));
  auto cells = MemRefType::get(
      {rows / 8, 8, chunks, 8}, b.getBF16Type(),
      StridedLayoutAttr::get(ctx, 0, {64, 8, 8 * rows, 1}), wgSpace);
  Value dst = memref::ReinterpretCastOp::create(
      b, loc, cells, buffer, 0, ArrayRef<int64_t>{rows / 8, 8, chunks, 8},
      ArrayRef<int64_t>{64, 8, 8 * rows, 1});
  return {buffer, dst};
}

/// Copies rows firstRow .. + 32 of `src` (token t) into rows rowOffset ..
/// + 32 of the canonical tile behind `dst` (its [R / 8, 8, C / 8, 8] view),
/// `chunks` 16-byte chunks per row from column `colBase` (null: 0) on,
/// with cp.async; chunks at or past `width` copy 0 bytes (16 zero bytes
/// written) from the row's first chunk, which exists.
static void copyCanonicalRows(OpBuilder &b, Location loc, Value dst,
                              Value src, Value t, Value firstRow,
                              Value colBase, int64_t rowOffset,
                              int64_t chunks, int64_t width,
                              int64_t threads) {
  MLIRContext *ctx = b.getContext();
  auto idx = [&](int64_t v) {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value zero = idx(0);
  // for (e = tid; e < 32 * chunks; e += threads): row h, chunk c.
  auto loop = scf::ForOp::create(b, loc, tid, idx(kCanonicalHalf * chunks),
                                 idx(threads));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value e = loop.getInductionVar();
  Value h = arith::DivUIOp::create(b, loc, e, idx(chunks));
  Value c = arith::RemUIOp::create(b, loc, e, idx(chunks));
  Value r = arith::AddIOp::create(b, loc, h, idx(rowOffset));
  Value inside, col;
  if (colBase) {
    Value at = arith::AddIOp::create(
        b, loc, colBase, arith::MulIOp::create(b, loc, c, idx(8)));
    inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, at,
                                   idx(width));
    col = arith::SelectOp::create(b, loc, inside, at, zero);
  } else {
    inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, c,
                                   idx(width / 8));
    col = arith::SelectOp::create(
        b, loc, inside, arith::MulIOp::create(b, loc, c, idx(8)), zero);
  }
  Value count = arith::SelectOp::create(b, loc, inside, idx(8), zero);
  nvgpu::DeviceAsyncCopyOp::create(
      b, loc, nvgpu::DeviceAsyncTokenType::get(ctx), dst,
      ValueRange{arith::DivUIOp::create(b, loc, r, idx(8)),
                 arith::RemUIOp::create(b, loc, r, idx(8)), c, zero},
      src, ValueRange{t, arith::AddIOp::create(b, loc, firstRow, h), col},
      b.getIndexAttr(8), count, b.getUnitAttr());
}

/// Stages q (rows 0-31) and do (rows 32-63, zero past its width) as one
/// 64-row tile in the canonical no-swizzle layout of wgmma: element (r, c)
/// at byte ((c / 8) * 8 + r / 8) * 128 + 16 (r % 8) + 2 (c % 8). The ops
/// get [1, 32, W] views marked with their first row (kCanonicalRowAttr);
/// their strides are only a bound for the verifiers, the mma lowerings
/// address the tile through canonicalRow.
static void stageCanonical(OpBuilder &b, Location loc, gpu::GPUFuncOp kernel,
                           Value q, Value dout, Value t, Value firstRow,
                           int64_t threads, int64_t w, int64_t d,
                           DenseMap<Value, Value> &staged) {
  MLIRContext *ctx = b.getContext();
  auto wgSpace = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  const int64_t chunks = w / 8;
  auto [buffer, dst] = allocCanonicalTile(b, loc, w);
  for (int i = 0; i < 2; ++i)
    copyCanonicalRows(b, loc, dst, i ? dout : q, t, firstRow, Value(),
                      i * kCanonicalHalf, chunks, i ? d : w, threads);
  for (int i = 0; i < 2; ++i) {
    int64_t width = i ? d : w;
    auto layout = StridedLayoutAttr::get(
        ctx, 0, {kCanonicalHalf * width, width, 1});
    auto viewType = MemRefType::get({1, kCanonicalHalf, width},
                                    b.getBF16Type(), layout, wgSpace);
    auto view = memref::ReinterpretCastOp::create(
        b, loc, viewType, buffer, 0,
        ArrayRef<int64_t>{1, kCanonicalHalf, width},
        ArrayRef<int64_t>{kCanonicalHalf * width, width, 1});
    view->setAttr(kCanonicalRowAttr, b.getI64IntegerAttr(i * kCanonicalHalf));
    staged[i ? dout : q] = view;
  }
}

/// For a kernel whose head blocks run in clusters of two (an even number
/// per token; smla-defer-scatter's column halves): the partner head
/// block's q and do rows (rows (g ^ 1) Hb ..) for this CTA's column half
/// [(g % 2) W / 2, (g % 2 + 1) W / 2), as one canonical [q'; do'] tile of
/// 2 Hb rows (do zero past its width), marked kPartnerRowsAttr; the
/// copies join the group that stageTokenRows waits for.
static void stagePartnerRows(OpBuilder &b, Location loc, Value q, Value dout,
                             Value t, Value g, int64_t heads, int64_t threads,
                             int64_t w, int64_t d) {
  auto idx = [&](int64_t v) {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  const int64_t half = w / 2, chunks = half / 8;
  auto [buffer, dst] = allocCanonicalTile(b, loc, half);
  buffer->setAttr(kPartnerRowsAttr, b.getUnitAttr());
  Value one = idx(1);
  Value firstRow = arith::MulIOp::create(
      b, loc, arith::XOrIOp::create(b, loc, g, one), idx(heads));
  Value colBase = arith::MulIOp::create(
      b, loc, arith::AndIOp::create(b, loc, g, one), idx(half));
  for (int i = 0; i < 2; ++i)
    copyCanonicalRows(b, loc, dst, i ? dout : q, t, firstRow, colBase,
                      i * kCanonicalHalf, chunks, i ? d : w, threads);
}

/// The q and do rows of the CTA's (token, head block) are read by every
/// block product of every top-k block: copy them once into shared memory
/// (rows padded by 16 bytes, against bank conflicts) and let tile_dot and
/// scatter_dkv read them there. With `headBlocks` = G * headBlocks CTAs per
/// token, block g owns rows [g * Hb, (g + 1) * Hb) of the token, Hb = H /
/// headBlocks; the staged view is [1, Hb, W] with a row stride of W + 8,
/// read at token 0 and head block 0. q is staged if it fits in `budget`
/// bytes next to the tiles, then do if it still fits; scatter_dkv reads
/// them staged only when both are. With `wgmma`, a kernel that qualifies
/// (wantsCanonical) stages both as one canonical [q; do] tile instead.
void mlir::smla::stageTokenRows(OpBuilder &b, Location loc, gpu::GPUFuncOp kernel,
                    ArrayRef<std::pair<StringRef, Value>> tensors,
                    IRMapping &mapping, Value t, Value g, int64_t threads,
                    int64_t headBlocks, int64_t budget, bool wgmma,
                    bool cluster) {
  Value q, dout, kv;
  for (auto [name, v] : tensors) {
    if (name == "q")
      q = mapping.lookupOrNull(v);
    if (name == "do")
      dout = mapping.lookupOrNull(v);
    if (name == "kv")
      kv = mapping.lookupOrNull(v);
  }
  if (!q || !dout)
    return;
  auto shapeOf = [](Value v) { return cast<MemRefType>(v.getType()); };
  int64_t allHeads = shapeOf(q).getDimSize(1);
  if (ShapedType::isDynamic(allHeads) || allHeads % headBlocks)
    return;
  int64_t heads = allHeads / headBlocks;
  int64_t widths[2] = {shapeOf(q).getDimSize(2), shapeOf(dout).getDimSize(2)};
  bool stage[2] = {false, false};
  int64_t used = workgroupBytesUsed(kernel);
  bool canonical =
      wgmma && !ShapedType::isDynamic(widths[0]) &&
      !ShapedType::isDynamic(widths[1]) &&
      wantsCanonical(kernel, threads, heads, widths[0], widths[1]) &&
      used + 2 * kCanonicalHalf * widths[0] * 2 <= budget;
  for (int i = 0; i < 2 && !canonical; ++i) {
    int64_t w = widths[i];
    if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(w) || w % 8)
      return;
    int64_t bytes = llvm::alignTo(heads * (w + kKeyTilePad) * 2, 128);
    stage[i] = used + bytes <= budget;
    if (stage[i])
      used += bytes;
  }
  if (canonical)
    stage[0] = stage[1] = true;
  if (!stage[0] && !stage[1])
    return;
  SmallVector<Attribute> stagedNames;
  for (int i = 0; i < 2; ++i)
    if (stage[i])
      stagedNames.push_back(b.getStringAttr(i == 0 ? "q" : "do"));
  kernel->setAttr(kStagedAttr, b.getArrayAttr(stagedNames));

  MLIRContext *ctx = b.getContext();
  auto wgSpace = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto idx = [&](int64_t v) {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value zero = idx(0);
  Value firstRow = arith::MulIOp::create(b, loc, g, idx(heads));
  DenseMap<Value, Value> staged;
  Value sources[2] = {q, dout};
  if (canonical)
    stageCanonical(b, loc, kernel, q, dout, t, firstRow, threads, widths[0],
                   widths[1], staged);
  // An even number of head blocks per group on wgmma: smla-defer-scatter
  // runs them in clusters of two (g, g ^ 1) that split the dKV columns (its
  // column halves need these rows; headBlocks counts the CTAs of all
  // groups). The budget also
  // holds the partner's packed tiles it adds (two blocks of [2][64][32]).
  int64_t groups = kv ? shapeOf(kv).getDimSize(1) : 0;
  if (canonical && cluster && groups > 0 && headBlocks % (2 * groups) == 0 &&
      widths[0] % 16 == 0 &&
      used + 2 * kCanonicalHalf * widths[0] * 3 + 2 * kPartnerTileBytes <=
          budget)
    stagePartnerRows(b, loc, q, dout, t, g, heads, threads, widths[0],
                     widths[1]);
  for (int i = 0; i < 2 && !canonical; ++i) {
    if (!stage[i])
      continue;
    Value src = sources[i];
    int64_t w = widths[i], stride = w + kKeyTilePad, chunks = w / 8;
    auto padded = MemRefType::get({heads, stride}, b.getBF16Type(),
                                  MemRefLayoutAttrInterface{}, wgSpace);
    Value buffer = memref::AllocaOp::create(b, loc, padded);
    auto layout = StridedLayoutAttr::get(ctx, 0, {heads * stride, stride, 1});
    auto viewType =
        MemRefType::get({1, heads, w}, b.getBF16Type(), layout, wgSpace);
    Value view = memref::ReinterpretCastOp::create(
        b, loc, viewType, buffer, 0, ArrayRef<int64_t>{1, heads, w},
        ArrayRef<int64_t>{heads * stride, stride, 1});
    // for (e = tid; e < heads * w / 8; e += threads): 16-byte chunks.
    Value nChunks = idx(chunks), eight = idx(8);
    auto loop =
        scf::ForOp::create(b, loc, tid, idx(heads * chunks), idx(threads));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value e = loop.getInductionVar();
    Value h = arith::DivUIOp::create(b, loc, e, nChunks);
    Value c = arith::MulIOp::create(
        b, loc, arith::RemUIOp::create(b, loc, e, nChunks), eight);
    // cp.async, 16 bytes (8 bf16) per chunk; the rows exist (t < T).
    nvgpu::DeviceAsyncCopyOp::create(
        b, loc, nvgpu::DeviceAsyncTokenType::get(ctx), view,
        ValueRange{zero, h, c}, src,
        ValueRange{t, arith::AddIOp::create(b, loc, firstRow, h), c},
        b.getIndexAttr(8), Value(), b.getUnitAttr());
    b.setInsertionPointAfter(loop);
    staged[src] = view;
  }
  Value copies = nvgpu::DeviceAsyncCreateGroupOp::create(
      b, loc, nvgpu::DeviceAsyncTokenType::get(ctx), ValueRange{});
  nvgpu::DeviceAsyncWaitOp::create(b, loc, copies, b.getI32IntegerAttr(0));
  // wgmma reads the canonical tile through the async proxy: order the
  // copies (generic proxy) before it, in every thread, before the barrier.
  if (canonical)
    emitProxyFence(b, loc);
  gpu::BarrierOp::create(b, loc);

  // Only ops that read the CTA's own rows (token t, head block g) move to
  // the staged view.
  auto own = [&](Value token, Value headBlock) {
    return token == t && headBlock == g;
  };
  kernel.walk([&](Operation *op) {
    if (auto dot = dyn_cast<TileDotOp>(op)) {
      if (!own(dot.getToken(), dot.getHeadBlock()))
        return;
      if (Value s = staged.lookup(dot.getLhs())) {
        dot.getLhsMutable().assign(s);
        dot.getTokenMutable().assign(zero);
        dot.getHeadBlockMutable().assign(zero);
      }
    } else if (auto scatter = dyn_cast<ScatterDkvOp>(op)) {
      Value s1 = staged.lookup(scatter.getQ());
      Value s2 = staged.lookup(scatter.getDout());
      if (s1 && s2 && own(scatter.getToken(), scatter.getHeadBlock())) {
        scatter.getQMutable().assign(s1);
        scatter.getDoutMutable().assign(s2);
        scatter.getTokenMutable().assign(zero);
        scatter.getHeadBlockMutable().assign(zero);
      }
    }
  });
}
