//===- DeferScatter.cpp - the dKV scatter in chunks over the next block ---===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// On wgmma a block's dKV products are fast (~0.8 us for the 32-row CTA)
// but its fp32 reductions are not (~5 us of the per-SM L2 rate): issued
// all at once they stall the warps on the full reduction queue. This pass
// packs each block's dS and P where its scatter was and issues the
// products and reductions in column chunks between the next block's
// phases, so each chunk's reductions drain while that block computes.
// Passes.td has the IR.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"
#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLADEFERSCATTER
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
/// Where chunk c of the next step goes: before the first of these ops in
/// the loop body, in order: the key gather (its wait, with
/// smla-prefetch-keys), the block products (first tile_dot), the dQ
/// accumulate; chunks past the last anchor go before it too. Measured on
/// the H200 against (gather, softmax, dq), (products, softmax, dq),
/// (products, dq, dq) and (products, dscores, dq): the best on B2 and B3
/// (`bench/bench_bwd.py --shapes B2 B3`).
SmallVector<Operation *> anchors(Block *body) {
  Operation *gather = nullptr;
  for (auto g : body->getOps<GatherOp>())
    if (!g.getIssueOnly() && !gather)
      gather = g;
  auto first = [&](auto tag) -> Operation * {
    using OpTy = decltype(tag);
    auto ops = body->getOps<OpTy>();
    return ops.empty() ? nullptr : *ops.begin();
  };
  SmallVector<Operation *> at;
  for (Operation *op : {gather, first(TileDotOp()), first(DqAccumulateOp())})
    if (op)
      at.push_back(op);
  return at;
}

/// The block's dQ on the packed dS (dq_packed, on wgmma) with the key tile
/// swizzled for wgmma, when `pack` (just placed where the scatter
/// was, at the end of the step) packs the dS that the step's only
/// dq_accumulate reads, that op reads the key tile of the step's only
/// gather into an accumulator in registers, and the block products, a
/// wgmma pair, are the tile's only other readers. The dq op moves after
/// the pack; the tile becomes an unpadded, 1 KB aligned 64 x 576 buffer
/// seen through a view marked swizzled (kSwizzledKeysAttr), which the
/// gather, the products and dq_packed lower by (LowerGather.cpp,
/// LowerTileDotWgmma.cpp, LowerDqWgmma.cpp).
void packedDq(PackDkvOp pack, int64_t threads) {
  Block *body = pack->getBlock();
  auto dqs = body->getOps<DqAccumulateOp>();
  auto gathers = body->getOps<GatherOp>();
  if (!llvm::hasSingleElement(dqs) || !llvm::hasSingleElement(gathers))
    return;
  DqAccumulateOp dq = *dqs.begin();
  GatherOp gather = *gathers.begin();
  auto keys = gather.getTile().getDefiningOp<memref::AllocaOp>();
  memref::AllocaOp acc = soleRootAlloca(dq.getAcc());
  if (!keys || dq.getDs() != pack.getDs() || dq.getTile() != keys || !acc ||
      !acc->hasAttr(kDqRegistersAttr))
    return;
  MemRefType type = keys.getType();
  if (type.getRank() != 2 || type.getDimSize(0) != 64 ||
      !type.getElementType().isBF16())
    return;
  SmallVector<TileDotOp> dots;
  for (Operation *user : keys->getUsers()) {
    if (auto dot = dyn_cast<TileDotOp>(user))
      dots.push_back(dot);
    else if (user != gather.getOperation() && user != dq.getOperation())
      return;
  }
  if (dots.size() != 2 || dots[0]->getBlock() != body ||
      !canUseWgmmaDots(dots[0], dots[1], threads))
    return;
  // dq moves down to the pack: nothing in between may touch its operands.
  if (!dq->isBeforeInBlock(pack))
    return;
  for (Operation *op = dq->getNextNode(); op != pack.getOperation();
       op = op->getNextNode()) {
    WalkResult touches = op->walk([&](Operation *inner) {
      for (Value v : inner->getOperands())
        if (llvm::is_contained(dq->getOperands(), v))
          return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (touches.wasInterrupted())
      return;
  }
  int64_t width = dq.getAcc().getType().getDimSize(1);
  int64_t slots = dqPackedSlots(width);
  if (!slots || dq.getAcc().getType().getDimSize(0) != kCanonicalHalf)
    return;

  OpBuilder b(keys);
  Location loc = keys.getLoc();
  auto flat =
      MemRefType::get({64, width}, b.getBF16Type(), MemRefLayoutAttrInterface{},
                      type.getMemorySpace());
  Value buffer = memref::AllocaOp::create(
      b, loc, flat, ValueRange{}, ValueRange{}, b.getI64IntegerAttr(1024));
  auto view = memref::ReinterpretCastOp::create(
      b, loc,
      MemRefType::get({64, width}, b.getBF16Type(),
                      StridedLayoutAttr::get(b.getContext(), 0, {width, 1}),
                      type.getMemorySpace()),
      buffer, 0, ArrayRef<int64_t>{64, width}, ArrayRef<int64_t>{width, 1});
  view->setAttr(kSwizzledKeysAttr, b.getUnitAttr());
  keys.replaceAllUsesWith(view.getResult());
  keys.erase();

  b.setInsertionPointAfter(pack);
  DqPackedOp::create(b, dq.getLoc(), pack.getPacked(), dq.getTile(),
                     dq.getAcc());
  dq.erase();
  acc->setAttr(kDqRegistersAttr, b.getI64IntegerAttr(slots));
}

/// Whether `op` may move up past the block products: nothing it reads or
/// writes can change there (an index mask without counters is a pure
/// function of its operands).
bool movable(Operation *op) {
  if (auto m = dyn_cast<IndexMaskOp>(op))
    return !m.getCounters();
  return isa<ScatterPackedOp>(op) ||
         (op->getNumRegions() == 0 && isMemoryEffectFree(op));
}

/// Fuses the step's softmax, dscores and pack into the block products'
/// warpgroup (kFusedEpilogueAttr) when the products are the wgmma pair
/// whose S and dP tiles only these ops touch: softmax S -> S and dscores
/// (S, dP) -> dP in place, the pack reading both. What sits between the
/// products and the pack (chunk 2, the pack's index masks) moves before
/// the products, in order; the pack moves right after dscores. With
/// `overlap`, chunk 2 then goes last, right before the products, marked
/// kOverlapRunAttr: warpgroups 1-3 run it alongside the fused run; with
/// `overlap` 2, chunk 1 too, right before it.
void fuseIntoProducts(PackDkvOp pack, int64_t threads, int64_t overlap) {
  Block *body = pack->getBlock();
  Value sTile = pack.getProbs(), dpTile = pack.getDs();
  TileDotOp qDot, doDot;
  for (auto dot : body->getOps<TileDotOp>()) {
    if (dot.getResult() == sTile && !qDot)
      qDot = dot;
    else if (dot.getResult() == dpTile && !doDot)
      doDot = dot;
    else
      return;
  }
  if (!qDot || !doDot)
    return;
  TileDotOp first = qDot->isBeforeInBlock(doDot) ? qDot : doDot;
  TileDotOp second = first == qDot ? doDot : qDot;
  if (first->getNextNode() != second.getOperation() ||
      !canUseWgmmaDots(first, second, threads))
    return;
  auto next = [&](Operation *op) {
    Operation *n = op->getNextNode();
    while (n && n != pack.getOperation() && !isa<SMLADialect>(n->getDialect()))
      n = n->getNextNode();
    return n;
  };
  auto softmax = dyn_cast_or_null<SoftmaxOp>(next(second));
  auto dscores = softmax ? dyn_cast_or_null<DScoresOp>(next(softmax))
                         : DScoresOp();
  if (!softmax || !dscores || softmax.getScores() != sTile ||
      softmax.getProbs() != sTile || dscores.getProbs() != sTile ||
      dscores.getDp() != dpTile || dscores.getDs() != dpTile ||
      !dscores->isBeforeInBlock(pack))
    return;
  // The tiles (and their allocas) are touched by these ops alone.
  SmallVector<Operation *> run{first, second, softmax, dscores, pack};
  for (Value tile : {sTile, dpTile}) {
    memref::AllocaOp root = rootAlloca(tile);
    SmallVector<Operation *> uses;
    if (root)
      collectUses(root, uses);
    for (Operation *use : uses)
      if (isa<SMLADialect>(use->getDialect()) && !llvm::is_contained(run, use))
        return;
    if (!root || uses.empty())
      return;
  }
  // Everything else between the products and the pack moves above them
  // (the lowering emits the run at the first tile_dot, so what the run
  // reads must be defined there).
  SmallVector<Operation *> moved;
  for (Operation *op = second->getNextNode(); op != pack.getOperation();
       op = op->getNextNode()) {
    if (llvm::is_contained(run, op))
      continue;
    if (!movable(op))
      return;
    moved.push_back(op);
  }
  for (Operation *op : moved)
    op->moveBefore(first);
  pack->moveAfter(dscores);
  auto mark = UnitAttr::get(pack.getContext());
  // With overlap, the last chunk moved goes right before the products
  // (after the pure ops moved with it) and runs alongside them.
  if (overlap)
    for (Operation *op : llvm::reverse(moved))
      if (isa<ScatterPackedOp>(op)) {
        OpBuilder b(pack);
        // Each marked chunk's value is its place counted back from the
        // run: 1, right before it, arrives at the named barrier.
        op->moveBefore(first);
        op->setAttr(kOverlapRunAttr, b.getI64IntegerAttr(1));
        // With overlap > 1, the chunks before it as well, in order, right
        // before it (the key gather then closes the step's first phase).
        auto chunkOf = [](ScatterPackedOp c) {
          return static_cast<int64_t>(c.getChunk());
        };
        int64_t last = chunkOf(cast<ScatterPackedOp>(op));
        int64_t marked = 1;
        Operation *at = op;
        for (int64_t c = last - 1; c > last - overlap && c >= 0; --c)
          for (auto other : body->getOps<ScatterPackedOp>())
            if (chunkOf(other) == c) {
              other->moveBefore(at);
              other->setAttr(kOverlapRunAttr, b.getI64IntegerAttr(++marked));
              at = other;
              break;
            }
        // On the kernel too, with the count (smla-compile checks
        // epilogue=overlap and overlap_chunks).
        pack->getParentOfType<gpu::GPUFuncOp>()->setAttr(
            kOverlapRunAttr, b.getI64IntegerAttr(marked));
        break;
      }
  for (Operation *op : run)
    op->setAttr(kFusedEpilogueAttr, mark);
  // On the kernel too: smla-compile refuses epilogue=fused where nothing
  // was fused.
  pack->getParentOfType<gpu::GPUFuncOp>()->setAttr(kFusedEpilogueAttr, mark);
  // Nothing reads or writes the tiles any more: no shared memory for them.
  for (Value tile : {sTile, dpTile})
    rootAlloca(tile)->setAttr(kFusedEpilogueAttr, mark);
}

/// The cluster operands of pack_dkv (partner tiles, mbarriers, count) and
/// scatter_packed (the partner rows first), or empty.
struct Cluster {
  Value rows, partner, bars, count;
};

/// A kernel of an even number n of head blocks per token (grid y = n g +
/// hb, smla-gpu-map: B1's H = 64 has two, H = 128 four) whose partner rows
/// were staged (kPartnerRowsAttr) runs head blocks hb and hb ^ 1 as a
/// cluster of two CTAs that split the dKV columns: allocates the
/// partner's packed tiles ([2 blocks][2][B][Hb]), their two mbarriers and
/// the per-thread pack count, and initialises the mbarriers at the
/// kernel's start (smla.cluster_init: a cluster barrier orders them
/// before any partner's st.async).
Cluster clusterOf(ScatterDkvOp scatter, Value packed) {
  auto div = scatter.getGroup().getDefiningOp<arith::DivUIOp>();
  auto y = div ? div.getLhs().getDefiningOp<gpu::BlockIdOp>() : nullptr;
  std::optional<int64_t> perGroup =
      div ? getConstantIntValue(div.getRhs()) : std::nullopt;
  if (!y || y.getDimension() != gpu::Dimension::y || !perGroup ||
      *perGroup < 2 || *perGroup % 2)
    return {};
  auto func = scatter->getParentOfType<gpu::GPUFuncOp>();
  Value rows;
  func.walk([&](memref::AllocaOp a) {
    if (a->hasAttr(kPartnerRowsAttr))
      rows = a.getResult();
  });
  if (!rows)
    return {};
  MLIRContext *ctx = scatter.getContext();
  Location loc = scatter.getLoc();
  // The partner's packed tiles are for the same slots only if both CTAs
  // walk their blocks in one order: the walk's rotation (BlockWalk.cpp)
  // must see the pair's even head block.
  bool rotated = true;
  func.walk([&](arith::AddIOp add) {
    if (!add->hasAttr(kWalkCtaAttr))
      return;
    auto mul = add.getRhs().getDefiningOp<arith::MulIOp>();
    if (!mul) {
      rotated = false;
      return;
    }
    OpBuilder b(mul);
    Value even = arith::AndIOp::create(
        b, loc, mul.getLhs(), arith::ConstantIndexOp::create(b, loc, -2));
    mul.setOperand(0, even);
  });
  if (!rotated)
    return {};
  func->setAttr("nvvm.cluster_dim", DenseI32ArrayAttr::get(ctx, {1, 2, 1}));
  OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
  auto wg = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto pt = cast<MemRefType>(packed.getType());
  Cluster c;
  c.rows = rows;
  c.partner = memref::AllocaOp::create(
      b, loc,
      MemRefType::get({2 * pt.getDimSize(0), pt.getDimSize(1),
                       pt.getDimSize(2)},
                      b.getBF16Type(), MemRefLayoutAttrInterface{}, wg));
  c.bars = memref::AllocaOp::create(
      b, loc,
      MemRefType::get({2}, b.getI64Type(), MemRefLayoutAttrInterface{}, wg));
  c.count = memref::AllocaOp::create(b, loc,
                                     MemRefType::get({}, b.getI32Type()));
  memref::StoreOp::create(
      b, loc, arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)),
      c.count, ValueRange{});
  ClusterInitOp::create(b, loc, c.bars);
  return c;
}

void defer(ScatterDkvOp scatter, int64_t threads, bool fuse,
           int64_t overlap) {
  auto loop = dyn_cast<scf::ForOp>(scatter->getParentOp());
  if (!loop || !canUseWgmma(scatter, threads) || !scatter.getMask())
    return;
  // Everything but the block's own dS, P, indices and mask must be the
  // same in every step: the chunks after the loop read them too.
  SmallVector<Value> fixed{scatter.getQ(),         scatter.getDout(),
                           scatter.getToken(),     scatter.getHeadBlock(),
                           scatter.getDkv(),       scatter.getGroup()};
  for (Value v : fixed)
    if (loop->isAncestor(v.getParentRegion()->getParentOp()))
      return;
  Block *body = loop.getBody();
  SmallVector<Operation *> at = anchors(body);
  if (at.empty() || llvm::any_of(at, [&](Operation *op) {
        return scatter->isBeforeInBlock(op);
      }))
    return;

  MLIRContext *ctx = scatter.getContext();
  Location loc = scatter.getLoc();
  auto func = scatter->getParentOfType<gpu::GPUFuncOp>();
  auto wg = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto ds = scatter.getDs().getType();
  int64_t hg = ds.getDimSize(0), block = ds.getDimSize(1);
  OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
  Value packed = memref::AllocaOp::create(
      b, loc,
      MemRefType::get({2, block, hg}, b.getBF16Type(),
                      MemRefLayoutAttrInterface{}, wg));
  Value slots = memref::AllocaOp::create(
      b, loc,
      MemRefType::get({block}, b.getI32Type(), MemRefLayoutAttrInterface{},
                      wg));

  b.setInsertionPoint(loop);
  Value none = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(-1));
  linalg::FillOp::create(b, loc, ValueRange{none}, ValueRange{slots});

  int64_t width = scatter.getDkv().getType().getDimSize(2);
  int64_t chunks = width / kWgmmaChunkColumns;
  // Chunk 0 waits for the partner's tiles that chunks 1 and 2 read too:
  // the cluster form needs the chunks in order in the step.
  bool ordered = at.size() < 2 || llvm::all_of(llvm::seq<size_t>(1, at.size()),
                                               [&](size_t i) {
                                                 return at[i - 1]->isBeforeInBlock(
                                                     at[i]);
                                               });
  Cluster cl = ordered ? clusterOf(scatter, packed) : Cluster{};
  SmallVector<Value> chunkCluster, packCluster;
  if (cl.rows) {
    chunkCluster = {cl.rows, cl.partner, cl.bars, cl.count};
    packCluster = {cl.partner, cl.bars, cl.count};
  }
  auto chunk = [&](OpBuilder &b, int64_t c) {
    ScatterPackedOp::create(b, loc, packed, slots, scatter.getQ(),
                            scatter.getDout(), scatter.getToken(),
                            scatter.getHeadBlock(), scatter.getDkv(),
                            scatter.getGroup(), chunkCluster, c, chunks);
  };
  for (int64_t c = 0; c < chunks; ++c) {
    b.setInsertionPoint(at[std::min<size_t>(c, at.size() - 1)]);
    chunk(b, c);
  }
  b.setInsertionPoint(scatter);
  auto pack =
      PackDkvOp::create(b, loc, scatter.getDs(), scatter.getProbs(),
                        scatter.getIndices(), scatter.getMask(), packed, slots,
                        packCluster);
  b.setInsertionPointAfter(loop);
  for (int64_t c = 0; c < chunks; ++c)
    chunk(b, c);
  scatter.erase();
  packedDq(pack, threads);
  if (fuse)
    fuseIntoProducts(pack, threads, overlap);
}

struct SMLADeferScatterPass
    : public mlir::smla::impl::SMLADeferScatterBase<SMLADeferScatterPass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<std::pair<ScatterDkvOp, int64_t>> work;
    getOperation()->walk([&](gpu::GPUFuncOp func) {
      auto block = func.getKnownBlockSize();
      if (!block)
        return;
      int64_t threads = (*block)[0];
      func.walk([&](ScatterDkvOp op) { work.push_back({op, threads}); });
    });
    if (overlapChunks < 0 || overlapChunks > 2 ||
        (overlapChunks && !fuseEpilogue)) {
      getOperation()->emitError()
          << "smla-defer-scatter: overlap-chunks must be 0, 1 or 2, and "
             "needs fuse-epilogue (got "
          << overlapChunks.getValue() << ")";
      return signalPassFailure();
    }
    for (auto [op, threads] : work)
      defer(op, threads, fuseEpilogue, overlapChunks);
  }
};
} // namespace
