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
/// (docs/performance.md, fourteenth session).
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

void defer(ScatterDkvOp scatter, int64_t threads) {
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
  auto chunk = [&](OpBuilder &b, int64_t c) {
    ScatterPackedOp::create(b, loc, packed, slots, scatter.getQ(),
                            scatter.getDout(), scatter.getToken(),
                            scatter.getHeadBlock(), scatter.getDkv(),
                            scatter.getGroup(), c, chunks);
  };
  for (int64_t c = 0; c < chunks; ++c) {
    b.setInsertionPoint(at[std::min<size_t>(c, at.size() - 1)]);
    chunk(b, c);
  }
  b.setInsertionPoint(scatter);
  PackDkvOp::create(b, loc, scatter.getDs(), scatter.getProbs(),
                    scatter.getIndices(), scatter.getMask(), packed, slots);
  b.setInsertionPointAfter(loop);
  for (int64_t c = 0; c < chunks; ++c)
    chunk(b, c);
  scatter.erase();
}

struct SMLADeferScatterPass
    : public mlir::smla::impl::SMLADeferScatterBase<SMLADeferScatterPass> {
  void runOnOperation() override {
    SmallVector<std::pair<ScatterDkvOp, int64_t>> work;
    getOperation()->walk([&](gpu::GPUFuncOp func) {
      auto block = func.getKnownBlockSize();
      if (!block)
        return;
      int64_t threads = (*block)[0];
      func.walk([&](ScatterDkvOp op) { work.push_back({op, threads}); });
    });
    for (auto [op, threads] : work)
      defer(op, threads);
  }
};
} // namespace
