//===- CtaEmitter.h - helpers for CTA-cooperative code ----------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Shared by the tile-op lowerings of smla-lower-to-nvvm: loops that spread
// work over the threads of a CTA, constants, and the per-lane view of the
// index, mask and live vectors (a vector of B lanes is never materialized
// in registers; each use re-evaluates the lane it needs).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATONVVM_CTAEMITTER_H
#define SMLA_CONVERSION_SMLATONVVM_CTAEMITTER_H

#include "smla/Conversion/SMLAToNVVM/SMLAToNVVM.h"

#include <functional>

namespace mlir::smla {

/// Scalar value of lane `lane` of a vector produced by a lowered op.
using LaneFn = std::function<Value(OpBuilder &, Location, Value lane)>;
/// The lane function of each lowered index block, mask and live-row vector.
using LaneMap = llvm::DenseMap<Value, LaneFn>;

struct CtaEmitter {
  CtaEmitter(OpBuilder &b, Location loc, Value tid, int64_t threads)
      : b(b), loc(loc), tid(tid), threads(threads) {}

  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value f32(double v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value i32(int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
  }

  /// for (e = tid; e < n; e += threads) body(e)
  void ctaLoop(Value n, function_ref<void(OpBuilder &, Value)> body) {
    scf::ForOp::create(b, loc, tid, n, index(threads), ValueRange{},
                       [&](OpBuilder &nb, Location l, Value e, ValueRange) {
                         body(nb, e);
                         scf::YieldOp::create(nb, l);
                       });
  }
  void ctaLoop(int64_t n, function_ref<void(OpBuilder &, Value)> body) {
    ctaLoop(index(n), body);
  }

  OpBuilder &b;
  Location loc;
  Value tid;
  int64_t threads;
};

/// An i32 constant at the builder's insertion point (CtaEmitter::i32 puts
/// it at the emitter's).
Value i32c(OpBuilder &b, Location loc, int64_t v);

/// Splits a flat index over rows of `width / 4` quads (groups of 4 f32
/// columns) into (row, first column of the quad).
std::pair<Value, Value> splitQuad(OpBuilder &b, Location loc, Value q,
                                  int64_t width);

/// Splits a flat index over rows of `n` elements into (row, column).
std::pair<Value, Value> splitRow(OpBuilder &b, Location loc, Value q,
                                 int64_t n);

/// acc = init; for (iv = lb; iv < ub; iv += step) acc = fn(iv, acc)
Value emitReduce(OpBuilder &b, Location loc, Value lb, Value ub, Value step,
                 Value init, function_ref<Value(OpBuilder &, Value, Value)> fn);

/// Loads `n` consecutive elements at `indices` and widens them to f32.
Value loadVecF32(OpBuilder &b, Location loc, Value memref, ValueRange indices,
                 int64_t n);

/// Head index hb * Hb + h: head h of head block `block` of Hb heads.
Value headIndex(OpBuilder &b, Location loc, Value block, int64_t hb, Value h);

/// Emits `if (cond && counters != null) counters[slot] += 1` (atomic).
void emitCount(OpBuilder &b, Location loc, Value counters, int64_t slot,
               Value cond);
/// The same for several conditions at once: one atomic add of how many
/// hold, where any does.
void emitCounts(OpBuilder &b, Location loc, Value counters, int64_t slot,
                ValueRange conds);

/// The non-finite row guard (LowerNonFiniteRows.cpp). isNonFinite: an i1
/// that holds when the stored value (a float or a vector of them, widened
/// to f32) has a NaN or an Inf. emitNonFiniteRowCount: after a CTA stored
/// `rows` rows of `width` values, each thread having `flagged` what it
/// stored, a barrier with an OR reduction (every thread must reach it);
/// if any thread flagged a value, thread per row re-reads its row through
/// `load` (f32 or bf16 at (row, col)) and adds 1 to counters[kNonFiniteRows]
/// for each row holding a NaN or an Inf.
using RowLoadFn = std::function<Value(OpBuilder &, Location, Value row,
                                      Value col)>;
Value isNonFinite(OpBuilder &b, Location loc, Value stored);
/// A thread's flag for stores in nested regions: a private variable (a
/// register once promoted), cleared where it is created, OR-ed by add.
struct NonFiniteFlag {
  /// The variable (allocated at the entry of `op`'s function), cleared at
  /// b's insertion point.
  NonFiniteFlag(OpBuilder &b, Location loc, Operation *op);
  void add(OpBuilder &b, Location loc, Value stored);
  Value get(OpBuilder &b, Location loc);
  Value slot;
};
void emitNonFiniteRowCount(CtaEmitter &e, Value counters, Value flagged,
                           int64_t rows, int64_t width, const RowLoadFn &load);

/// `@valid red.global.add.v{2,4}.f32 [dkv[select(valid, raw, 0), g, col]],
/// values` (2 or 4 consecutive columns): a masked lane adds nothing and its
/// index never becomes an address. `--smla-diagnostic-dkv` (measurements
/// only) switches every reduction off.
/// With `policy` (an L2 cache policy from emitEvictLastPolicy), the
/// reduction carries it as its `.L2::cache_hint`.
void emitMaskedRed(OpBuilder &b, Location loc, Value dkv, Value group,
                   Value valid, Value raw, Value col, ValueRange values,
                   Value policy = Value());
/// `createpolicy.fractional.L2::evict_last.b64 1.0`: lines touched under
/// it stay in L2 ahead of others (the fp32 dKV rows that later
/// reductions add to).
Value emitEvictLastPolicy(OpBuilder &b, Location loc);

/// scatter_dkv on tensor cores (LowerScatterMma.cpp); `mask` and `index`
/// give the lanes of the op's mask and index vectors.
bool canUseMma(ScatterDkvOp op, int64_t threads);
void lowerScatterDkvMma(CtaEmitter &e, ScatterDkvOp op, const LaneFn &mask,
                        const LaneFn &index);
/// The dKV scatter on wgmma (LowerScatterWgmma.cpp), for q and do staged
/// as the canonical [q; do] tile: smla-defer-scatter splits a scatter_dkv
/// for which canUseWgmma holds into pack_dkv and scatter_packed chunks of
/// kWgmmaChunkColumns columns (48 per warpgroup).
constexpr int64_t kWgmmaChunkColumns = 192;
bool canUseWgmma(ScatterDkvOp op, int64_t threads);
void lowerPackDkv(CtaEmitter &e, PackDkvOp op, const LaneFn &mask,
                  const LaneFn &index);
void lowerScatterPacked(CtaEmitter &e, ScatterPackedOp op);
/// smla.cluster_init: thread i < N initialises mbarrier i, then the fence
/// and the cluster barrier (LowerScatterWgmma.cpp).
void lowerClusterInit(CtaEmitter &e, ClusterInitOp op);

/// smla.gather as masked cp.async into the row-major or the swizzled key
/// tile (LowerGather.cpp); `mask` and `index` give the lanes of the op's
/// mask and index vectors.
LogicalResult lowerGather(CtaEmitter &e, GatherOp op, const LaneFn &mask,
                          const LaneFn &index);

/// tile_dot and dq_accumulate, on CUDA cores or on tensor cores (mma.sync).
void lowerTileDot(CtaEmitter &e, TileDotOp op, bool mma);
void lowerPairUnion(CtaEmitter &e, PairUnionOp op);

/// LowerLanes.cpp: the lane functions of index blocks (lanes past K read
/// nothing and are -1), their masks (and invalid-slot counts), index pairs
/// and live rows (and dead-row counts).
void lowerIndexLoadLanes(IndexLoadOp op, LaneMap &lanes);
void lowerIndexMaskLanes(CtaEmitter &e, IndexMaskOp op, LaneMap &lanes);
void lowerIndexPairLanes(IndexPairOp op, LaneMap &lanes);
void lowerRowLiveLanes(CtaEmitter &e, RowLiveOp op, LaneMap &lanes);
/// Two adjacent tile_dots on one key tile (scores and dP) as one tensor-core
/// pass that loads each key fragment once; when they may be fused.
bool canFuseTileDots(TileDotOp first, TileDotOp second);
void lowerTileDotPair(CtaEmitter &e, TileDotOp first, TileDotOp second);
/// The fused pair on wgmma (LowerTileDotWgmma.cpp), for q and do staged
/// as the canonical [q; do] tile of a 32-row CTA at block 64.
bool canUseWgmmaDots(TileDotOp first, TileDotOp second, int64_t threads);
/// What replaces the pair's stores into the S and dP tiles (a fused
/// epilogue, kFusedEpilogueAttr), in warpgroup 0: `before` ahead of the
/// wgmma chain (so its loads overlap it), with the thread's keys j0 =
/// 16 (warp % 4) + lane / 4 and j1 = j0 + 8 and its pair row kq = 2 (lane
/// % 4); `after` with the accumulators: acc[4 i + {0, 1}] key j0, rows
/// 8 i + kq + {0, 1} of [q; do] (i < 4: S, else dP), acc[4 i + {2, 3}]
/// key j1.
struct ProductsEpilogue {
  std::function<void(OpBuilder &, Location, Value j0, Value j1, Value kq)>
      before;
  std::function<void(OpBuilder &, Location, ArrayRef<Value> acc)> after;
};
void lowerTileDotPairWgmma(CtaEmitter &e, TileDotOp first, TileDotOp second,
                           const ProductsEpilogue *epilogue = nullptr);
/// The fused epilogue run of smla-defer-scatter (kFusedEpilogueAttr;
/// LowerEpilogueWgmma.cpp), lowered at its first tile_dot: the wgmma
/// pair, then softmax, dS and the pack in warpgroup 0's accumulators. The
/// other ops of the run go into `fusedAway` (they lower to nothing).
LogicalResult lowerFusedEpilogueRun(CtaEmitter &e, TileDotOp first,
                                    TileDotOp second, const LaneMap &lanes,
                                    DenseSet<Operation *> &fusedAway);
/// Delta = rowsum(o * do) of the op's heads into its delta buffer, on the
/// emitter's threads (LowerTileOps.cpp).
LogicalResult lowerDelta(CtaEmitter &e, DeltaOp op);
/// softmax and dscores over their tiles (LowerSoftmax.cpp).
LogicalResult lowerSoftmax(CtaEmitter &e, SoftmaxOp op, const LaneMap &lanes);
void lowerDScores(CtaEmitter &e, DScoresOp op);
/// The softmax scale of `op` times `factor`, as an f32 value: from the
/// kernel's `sm_scale` argument when it has one (runtimeScale), else
/// `attrScale` (the op's constant).
Value scaleValue(OpBuilder &b, Location loc, Operation *op, double attrScale,
                 double factor);
/// softmax's scale times log2e.
Value softmaxScaleLog2(CtaEmitter &e, SoftmaxOp op);
/// The guarded softmax element (LowerSoftmax.cpp): P of score `s` given
/// its row's lse in log2 units, `k` = scale * log2e and `ok()` (key valid
/// and row live): exp2(min(s k - lse, clamp)), 0 unless ok, handed to
/// `use`; then counts the clamped elements in the op's counters, or with
/// `clamped` leaves the count to the caller (the element's clamp flag, or
/// null without counters).
Value softmaxElement(OpBuilder &b, Location loc, SoftmaxOp op, Value k,
                     Value s, Value lse, llvm::function_ref<Value()> ok,
                     llvm::function_ref<void(Value)> use,
                     Value *clamped = nullptr);
/// Row h's lse in log2 units (softmax's base converted).
Value softmaxRowLse(OpBuilder &b, Location loc, SoftmaxOp op, Value h);
/// dS = P (dP - delta) scale, exactly 0 where P is 0.
Value dscoreElement(OpBuilder &b, Location loc, Value p, Value dp,
                    Value delta, Value scale);
/// pack_dkv's pieces (LowerScatterWgmma.cpp): the byte offset of the bf16
/// pair (rows h, h + 1; slot j = 8 jBlock + jLow) in a K-major canonical
/// [64][32] tile; the
/// slot writes (threads firstThread + j, j < 64; the slots' own fence is
/// the barrier that follows); the cluster form's pack count (every
/// thread keeps its own) and its advance; the partner's buffer count % 2
/// (its address in the partner CTA's window, the partner's rank, the
/// mbarrier), one pair's st.async to the same byte there, and thread 0
/// arming its own mbarrier for the partner's 8 KB.
Value packedPairOffset(OpBuilder &b, Location loc, Value h, Value jBlock,
                       Value jLow);
void writePackSlots(CtaEmitter &e, PackDkvOp op, const LaneFn &mask,
                    const LaneFn &index, int64_t firstThread);
/// The named barrier between the chunks that run alongside a fused run
/// (kOverlapRunAttr) and the run: warpgroups 1-3 arrive once the last
/// chunk's wgmma have read the packed tiles and they hold its slots (the
/// chunks before it precede it in program order); warpgroup 0 syncs
/// before it overwrites either (all 512 threads take part).
void arriveOverlap(OpBuilder &b, Location loc);
void syncOverlap(OpBuilder &b, Location loc);
Value packCount(CtaEmitter &e, PackDkvOp op);
void advancePackCount(CtaEmitter &e, PackDkvOp op, Value count);
struct PartnerTiles {
  Value base, rank, bar;
};
PartnerTiles partnerTiles(CtaEmitter &e, PackDkvOp op, Value count);
void sendToPartner(CtaEmitter &e, const PartnerTiles &t, Value offset,
                   Value pair);
void armPartnerTiles(CtaEmitter &e, const PartnerTiles &t);
/// dq_packed on wgmma (LowerDqWgmma.cpp), for a 32-row CTA at block 64 on
/// 512 threads with the key tile swizzled (swizzledKeys): dQ^T = K^T dS^T
/// in m64n32k16 tiles of 64 columns, warpgroup w taking tiles w, w + 4,
/// ... and, when the tile count is 1 mod 4, rows 8 w to 8 w + 7 of the
/// last. The accumulators stay in registers (the
/// private array of the register form). dqPackedSlots gives the array's
/// size in 8-register slots for a width (0: the form does not apply).
int64_t dqPackedSlots(int64_t width);
void lowerDqPacked(CtaEmitter &e, DqPackedOp op, Value regs);
void storeDqPackedRegisters(CtaEmitter &e, StoreDqOp op, Value regs,
                            NonFiniteFlag *flag = nullptr);

/// dq_accumulate; with `regs` (mma only) in the register form
/// (LowerDqMma.cpp): C in the private array of `slots` column pairs.
void lowerDqAccumulate(CtaEmitter &e, DqAccumulateOp op, bool mma,
                       Value regs = Value(), int64_t slots = 0);
/// Column pairs per warp of the register form of `op` at `threads`
/// threads, or 0 where it does not apply (more than one m tile, no mma,
/// more than 64 accumulator registers).
int64_t dqRegisterSlots(DqAccumulateOp op, int64_t threads);
/// The private array of the register form (at the function's entry).
Value allocDqRegisters(OpBuilder &b, Location loc, int64_t slots);
/// Element `i` of that array (a constant index: LLVM keeps it in a
/// register).
Value loadReg(OpBuilder &b, Location loc, Value regs, int64_t i);
void storeReg(OpBuilder &b, Location loc, Value regs, int64_t i, Value v);
/// The register form's fill with zeros and store_dq (with `flag`, which
/// also flags each stored value that is a NaN or an Inf).
void zeroDqRegisters(CtaEmitter &e, Value regs, int64_t slots);
void storeDqRegisters(CtaEmitter &e, StoreDqOp op, Value regs, int64_t slots,
                      NonFiniteFlag *flag = nullptr);

} // namespace mlir::smla

#endif // SMLA_CONVERSION_SMLATONVVM_CTAEMITTER_H
