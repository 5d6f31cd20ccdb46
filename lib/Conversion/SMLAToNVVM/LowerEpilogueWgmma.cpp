//===- LowerEpilogueWgmma.cpp - softmax, dS and the pack in registers -----===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// The fused epilogue run of smla-defer-scatter (kFusedEpilogueAttr): the
// block products on wgmma (LowerTileDotWgmma.cpp) leave S^T and dP^T for
// the same (key, row) pairs in the same thread of warpgroup 0, and
// softmax, dscores and pack_dkv are elementwise given the rows' lse,
// liveness and delta and the keys' masks. So that warpgroup finishes the
// block's scores in its accumulators:
//
//   before the wgmma chain  its 8 rows' lse and liveness and its 2 keys'
//                           masks (the global loads overlap the chain)
//   after the wait          the rows' delta (shared memory), P = the
//                           guarded exp2 (softmaxElement), dS
//                           (dscoreElement), both packed to bf16 pairs
//                           straight into the K-major canonical tiles
//                           that pack_dkv writes (a warp's 32 stores fill
//                           one 128-byte line), the cluster form's sends
//                           to the partner and the async-proxy fence
//
// Warpgroup 1 writes the slots after the branch (threads 128 + j). With
// the step's last chunk, or last two, alongside the run (kOverlapRunAttr,
// in warpgroups 1-3: LowerScatterWgmma.cpp), warpgroup 0 keeps its 16
// pairs in registers until named barrier 1 says the chunks have read the
// packed tiles and the slots, then stores and sends them and writes the
// slots itself (threads j < 64).
//
// The S and dP tiles are not touched; smla-insert-barriers sees the run
// as one op at the products' place, so the step loses the barriers
// around the CTA-wide softmax / dscores pass and before the pack.
// Every thread advances its pack count after the warpgroup's branch (the
// scatter chunks read it in all warps).
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/Wgmma.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;

namespace mlir::smla {

namespace {
/// The lane functions of softmax's masks (pair: its pair mask or null) and
/// live rows and of the pack's indices.
struct EpilogueLanes {
  LaneFn mask, pair, live, packMask, packIndex;
};

/// The run given its ops; `k` is softmax's scale times log2e and `dsScale`
/// dscores' scale.
void lowerFusedEpilogue(CtaEmitter &e, TileDotOp first, TileDotOp second,
                        SoftmaxOp softmax, DScoresOp dscores, PackDkvOp pack,
                        const EpilogueLanes &lanes, Value k, Value dsScale,
                        bool overlap) {
  bool cluster = !pack.getCluster().empty();
  Value count = cluster ? packCount(e, pack) : Value();
  // Row r = 2 i + x of this thread is h = 8 i + kq + x (i < 4, x < 2).
  SmallVector<Value> lse, live;
  Value keys[2], keyOk[2], pairOk[2], kq;
  ProductsEpilogue epilogue;
  epilogue.before = [&](OpBuilder &b, Location loc, Value j0, Value j1,
                        Value pairRow) {
    Mma m{b, loc};
    kq = pairRow;
    keys[0] = j0;
    keys[1] = j1;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t x = 0; x < 2; ++x) {
        Value h = m.add(kq, 8 * i + x);
        lse.push_back(softmaxRowLse(b, loc, softmax, h));
        live.push_back(lanes.live(b, loc, h));
      }
    for (int64_t jj = 0; jj < 2; ++jj) {
      keyOk[jj] = lanes.mask(b, loc, keys[jj]);
      if (lanes.pair)
        pairOk[jj] = lanes.pair(b, loc, keys[jj]);
    }
  };
  epilogue.after = [&](OpBuilder &b, Location loc, ArrayRef<Value> acc) {
    Mma m{b, loc};
    Value dsBase = m.base(pack.getPacked());
    Value pBase = m.add(dsBase, kPackedTileBytes);
    auto f32x2 = VectorType::get({2}, b.getF32Type());
    PartnerTiles partner =
        cluster ? partnerTiles(e, pack, count) : PartnerTiles();
    SmallVector<Value> delta, clamped;
    // With a chunk alongside (overlap), the local stores wait for its
    // reads of the packed tiles: the pairs (of row block i, key jj) are
    // kept until the named barrier, their addresses computed after it.
    struct Deferred {
      int64_t i, jj;
      Value ds, p;
    };
    SmallVector<Deferred> deferred;
    auto offsetOf = [&](int64_t i, int64_t jj) {
      return packedPairOffset(b, loc, m.add(kq, 8 * i), m.div(keys[jj], 8),
                              m.rem(keys[jj], 8));
    };
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t x = 0; x < 2; ++x)
        delta.push_back(memref::LoadOp::create(
            b, loc, dscores.getDelta(), ValueRange{m.add(kq, 8 * i + x)}));
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t jj = 0; jj < 2; ++jj) {
        Value p[2], ds[2];
        for (int64_t x = 0; x < 2; ++x) {
          int64_t r = 2 * i + x;
          // A step of two tokens: rows 16.. (i >= 2) are the second's.
          auto ok = [&]() -> Value {
            return arith::AndIOp::create(
                b, loc, lanes.pair && i >= 2 ? pairOk[jj] : keyOk[jj], live[r]);
          };
          Value s = acc[4 * i + 2 * jj + x];
          Value dp = acc[16 + 4 * i + 2 * jj + x];
          Value over;
          p[x] = softmaxElement(
              b, loc, softmax, k, s, lse[r], ok, [](Value) {}, &over);
          if (over)
            clamped.push_back(over);
          ds[x] = dscoreElement(b, loc, p[x], dp, delta[r], dsScale);
        }
        Value dsPair = m.packBf16(vector::FromElementsOp::create(
            b, loc, f32x2, ValueRange{ds[0], ds[1]}));
        Value pPair = m.packBf16(vector::FromElementsOp::create(
            b, loc, f32x2, ValueRange{p[0], p[1]}));
        Value offset;
        if (overlap) {
          deferred.push_back({i, jj, dsPair, pPair});
        } else {
          offset = offsetOf(i, jj);
          LLVM::StoreOp::create(b, loc, dsPair,
                                m.ptr(m.add(dsBase, offset), 3),
                                /*alignment=*/4);
          LLVM::StoreOp::create(b, loc, pPair, m.ptr(m.add(pBase, offset), 3),
                                /*alignment=*/4);
        }
        if (cluster && !overlap) {
          sendToPartner(e, partner, offset, dsPair);
          sendToPartner(e, partner, m.add(offset, kPackedTileBytes), pPair);
        }
      }
    if (overlap)
      syncOverlap(b, loc);
    for (const Deferred &x : deferred) {
      Value offset = offsetOf(x.i, x.jj);
      LLVM::StoreOp::create(b, loc, x.ds, m.ptr(m.add(dsBase, offset), 3),
                            /*alignment=*/4);
      LLVM::StoreOp::create(b, loc, x.p, m.ptr(m.add(pBase, offset), 3),
                            /*alignment=*/4);
      if (cluster) {
        sendToPartner(e, partner, offset, x.ds);
        sendToPartner(e, partner, m.add(offset, kPackedTileBytes), x.p);
      }
    }
    // The slots too wait for the chunk's loads: warpgroup 0 writes them.
    if (overlap)
      writePackSlots(e, pack, lanes.packMask, lanes.packIndex, 0);
    if (cluster)
      armPartnerTiles(e, partner);
    // The 16 elements' clamps in one count (one branch, not 16).
    emitCounts(b, loc, softmax.getCounters(), kClamped, clamped);
    emitProxyFence(b, loc);
  };
  lowerTileDotPairWgmma(e, first, second, &epilogue);
  // The slots are plain stores (read by generic loads): warpgroup 1 writes
  // them while warpgroup 0 runs the products.
  if (!overlap)
    writePackSlots(e, pack, lanes.packMask, lanes.packIndex, 128);
  if (cluster)
    advancePackCount(e, pack, count);
}
} // namespace

LogicalResult lowerFusedEpilogueRun(CtaEmitter &e, TileDotOp first,
                                    TileDotOp second, const LaneMap &lanes,
                                    DenseSet<Operation *> &fusedAway) {
  SoftmaxOp softmax;
  DScoresOp dscores;
  PackDkvOp pack;
  for (Operation *o = second->getNextNode(); o && !pack; o = o->getNextNode()) {
    if (!o->hasAttr(kFusedEpilogueAttr))
      continue;
    if (auto s = dyn_cast<SoftmaxOp>(o); s && !softmax)
      softmax = s;
    else if (auto d = dyn_cast<DScoresOp>(o); d && softmax && !dscores)
      dscores = d;
    else if (auto p = dyn_cast<PackDkvOp>(o); p && dscores)
      pack = p;
    else
      break;
  }
  if (!pack || !canUseWgmmaDots(first, second, e.threads))
    return first.emitOpError()
           << "starts a fused epilogue (" << kFusedEpilogueAttr
           << ") that is not the wgmma pair, softmax, dscores and pack_dkv";
  if (!softmax.isGuarded())
    return softmax.emitOpError() << "is unguarded; run the smla-guarded "
                                    "pipeline before the GPU lowering";
  EpilogueLanes l;
  l.mask = lanes.lookup(softmax.getMask());
  if (softmax.getPairMask())
    l.pair = lanes.lookup(softmax.getPairMask());
  l.live = lanes.lookup(softmax.getLive());
  l.packMask = lanes.lookup(pack.getMask());
  l.packIndex = lanes.lookup(pack.getIndices());
  Value dsScale = scaleValue(e.b, e.loc, dscores,
                             dscores.getScale().convertToDouble(), 1.0);
  Operation *prev = first->getPrevNode();
  bool overlap = prev && prev->hasAttr(kOverlapRunAttr);
  lowerFusedEpilogue(e, first, second, softmax, dscores, pack, l,
                     softmaxScaleLog2(e, softmax), dsScale, overlap);
  for (Operation *o : {second.getOperation(), softmax.getOperation(),
                       dscores.getOperation(), pack.getOperation()})
    fusedAway.insert(o);
  return success();
}

} // namespace mlir::smla
