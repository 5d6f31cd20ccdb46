//===- ScheduleWarpSpecialized.cpp - tile loop nest -> smla_gpu roles -----===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Restates the top-k block loop of a bwd gpu.func (one token and 64 heads
// per CTA, blocks of 64 keys) as three warpgroups that hand work to each
// other through pipelines (docs/schedule.md):
//
//   producer  q and do rows once, then per block: the slots (index or -1)
//             and the masked gather of the 64 key rows into the key stage;
//   softmax   S = q K^T and dP = do V^T (wgmma, both operands in shared
//             memory), the guarded softmax and dS on the accumulator
//             fragments, P and dS (transposed, bf16) to shared memory for
//             the dKV role, then dQ[:, 0:256] += dS K with dS as the
//             register A operand;
//   dkv       dQ[:, 256:W] += dS K (A from shared memory), releases the
//             key stage, then dKV in 64-column chunks (dS^T q + P^T do)
//             reduced into the fp32 dKV buffer.
//
// The key stage is released as soon as both roles' dQ products have read
// it, so the next block's gather overlaps this block's dKV chunks. The
// guards are the tile ops' own: the index and mask ops are cloned into the
// producer, the softmax is plain arith/math on fragments with the clamp
// and the select of smla-verify-guards' lowered form.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"
#include "smla/Conversion/SMLAToSMLAGPU/SMLAToSMLAGPU.h"
#include "smla/Conversion/SMLAToSMLAGPU/Step.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLASCHEDULEWARPSPECIALIZED
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;
namespace sg = mlir::smla_gpu;

namespace {
constexpr double kLog2e = 1.4426950408889634;
/// Named barrier of the softmax role after its Delta (ids 0 is the CTA's).
constexpr int32_t kDeltaBarrier = 1;

using Step = WarpSpecializedStep;
} // namespace

namespace {
/// Builds the warp-specialized body of one bwd kernel.
class Scheduler {
public:
  Scheduler(gpu::GPUFuncOp func, const Step &step, int64_t softmaxChunks,
            int64_t dkvDepth)
      : func(func), s(step), b(s.delta), loc(s.delta.getLoc()),
        softmaxChunks(softmaxChunks), dkvDepth(dkvDepth) {}

  LogicalResult run() {
    w = dimOf(s.gather.getKv(), 2);
    d = dimOf(s.dp.getLhs(), 2);
    allocate();
    auto ws = sg::WarpSpecializeOp::create(
        b, loc, b.getStrArrayAttr({"producer", "softmax", "dkv"}),
        b.getDenseI32ArrayAttr({kWsProducerRegisters, kWsConsumerRegisters,
                                kWsConsumerRegisters}),
        /*partitions=*/3);
    for (Region &r : ws.getPartitions())
      r.push_back(new Block);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(&ws.getPartitions()[0].front());
      if (failed(producer()))
        return failure();
      b.setInsertionPointToStart(&ws.getPartitions()[1].front());
      softmaxRole();
      b.setInsertionPointToStart(&ws.getPartitions()[2].front());
      dkvRole();
    }
    if (Value counters = s.store.getCounters())
      sg::CountNonFiniteRowsOp::create(b, loc, s.store.getDq(),
                                       s.store.getToken(),
                                       headRow(s.store.getHeadBlock()),
                                       counters);
    eraseStep();
    return success();
  }

private:
  Value c(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value f32(double v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value splat(VectorType t, Attribute v) {
    return arith::ConstantOp::create(b, loc, DenseElementsAttr::get(t, v));
  }

  MemRefType workgroup(ArrayRef<int64_t> shape, Type elem) {
    return MemRefType::get(shape, elem, MemRefLayoutAttrInterface{},
                           gpu::AddressSpaceAttr::get(
                               b.getContext(), gpu::AddressSpace::Workgroup));
  }
  /// A shared tile; wgmma's 128-byte swizzle needs 1024-byte alignment.
  Value tile(int64_t rows, int64_t cols) {
    return memref::AllocaOp::create(b, loc, workgroup({rows, cols},
                                                      b.getBF16Type()),
                                    b.getI64IntegerAttr(1024));
  }
  Value pipeline(int64_t producers, int64_t consumers, bool async) {
    Value bars = memref::AllocaOp::create(
        b, loc, workgroup({2}, b.getI64Type()), b.getI64IntegerAttr(8));
    auto type = sg::PipelineType::get(b.getContext(), 1, producers, consumers);
    auto p = sg::PipelineCreateOp::create(b, loc, type, bars);
    if (async)
      p.setAsyncCopies(true);
    return p;
  }

  void allocate() {
    qTile = tile(kWsRows, w);
    doTile = tile(kWsRows, d);
    keyTile = tile(kWsKeys, w);
    pTile = tile(kWsKeys, kWsRows);
    dsTile = tile(kWsKeys, kWsRows);
    slots = memref::AllocaOp::create(
        b, loc, workgroup({kWsKeys}, b.getI32Type()), b.getI64IntegerAttr(16));
    deltaBuf = memref::AllocaOp::create(
        b, loc, workgroup({kWsRows}, b.getF32Type()), b.getI64IntegerAttr(16));
    int64_t wg = sg::kWarpgroupThreads;
    rowsPipe = pipeline(wg, 2 * wg, /*async=*/true);
    keysPipe = pipeline(wg, 2 * wg, /*async=*/true);
    // Both consumer roles read P^T and dS^T (their dKV chunks).
    pdsPipe = pipeline(wg, 2 * wg, /*async=*/false);
  }

  /// The loop over the step's blocks with the old loop's bounds, its body
  /// built by `body(iv, iterArgs)` (iv an index) returning the values to
  /// yield. The loop counts in i32 (a block count is below 2^31 / 64): at
  /// 240 registers a consumer role has no room for the 64-bit bound, which
  /// ptxas spilled and reloaded every block.
  scf::ForOp blockLoop(
      ValueRange inits,
      function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto i32 = [&](Value v) {
      return arith::IndexCastOp::create(b, loc, b.getI32Type(), v);
    };
    return scf::ForOp::create(
        b, loc, i32(s.loop.getLowerBound()), i32(s.loop.getUpperBound()),
        i32(s.loop.getStep()), inits,
        [&](OpBuilder &nb, Location l, Value iv, ValueRange args) {
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPointToStart(nb.getInsertionBlock());
          Value index = arith::IndexCastOp::create(b, l, b.getIndexType(), iv);
          SmallVector<Value> results = body(index, args);
          scf::YieldOp::create(b, l, results);
        });
  }

  /// The ops of the old loop body that `roots` need (index loads, masks,
  /// the rotated block), cloned in order with the loop's induction
  /// variable mapped to `iv`; the counting-only masks of a head split
  /// come along.
  void cloneSlice(ArrayRef<Value> roots, Value iv, IRMapping &map) {
    Block *body = s.loop.getBody();
    DenseSet<Operation *> needed;
    SmallVector<Value> work(roots.begin(), roots.end());
    for (auto mask : body->getOps<IndexMaskOp>())
      if (mask.getCounters())
        work.push_back(mask.getMask());
    while (!work.empty()) {
      Value v = work.pop_back_val();
      Operation *def = v.getDefiningOp();
      if (!def || def->getBlock() != body || !needed.insert(def).second)
        continue;
      for (Value operand : def->getOperands())
        work.push_back(operand);
    }
    map.map(s.loop.getInductionVar(), iv);
    for (Operation &op : body->without_terminator())
      if (needed.contains(&op))
        b.clone(op, map);
  }

  LogicalResult producer() {
    Value t = s.dp.getToken();
    Value row0 = headRow(s.dp.getHeadBlock());
    sg::LoadRowsOp::create(b, loc, s.scores.getLhs(), t, row0, qTile);
    sg::LoadRowsOp::create(b, loc, s.dp.getLhs(), t, row0, doTile);
    sg::ProducerCommitOp::create(b, loc, rowsPipe, c(0));
    Value scatterMask = s.scatter.getMask();
    blockLoop({}, [&](Value iv, ValueRange) -> SmallVector<Value> {
      IRMapping map;
      cloneSlice({s.gather.getIndices(), s.gather.getMask(), scatterMask}, iv,
                 map);
      Value use = blockUse(iv);
      sg::ProducerAcquireOp::create(b, loc, keysPipe, use);
      Value idx = map.lookup(s.gather.getIndices());
      sg::WriteSlotsOp::create(
          b, loc, idx,
          ValueRange{map.lookup(s.gather.getMask()), map.lookup(scatterMask)},
          slots);
      sg::GatherKeysOp::create(b, loc, s.gather.getKv(), idx,
                               map.lookupOrDefault(s.gather.getGroup()),
                               map.lookup(s.gather.getMask()), keyTile);
      sg::ProducerCommitOp::create(b, loc, keysPipe, use);
      return {};
    });
    return success();
  }

  /// The pipelines count uses from 0: block j's use is j - lower bound.
  Value blockUse(Value iv) {
    return arith::SubIOp::create(b, loc, iv, s.loop.getLowerBound());
  }

  /// The CTA's first head: head block * 64.
  Value headRow(Value headBlock) {
    return arith::MulIOp::create(b, loc, headBlock, c(kWsRows));
  }

  /// lse[t, row0 .. row0 + 64) as a 1-D view.
  Value lseRow() {
    Value lse = s.softmax.getLse();
    SmallVector<OpFoldResult> offsets{s.softmax.getToken(),
                                      headRow(s.softmax.getHeadBlock())};
    SmallVector<OpFoldResult> sizes{b.getIndexAttr(1),
                                    b.getIndexAttr(kWsRows)};
    SmallVector<OpFoldResult> strides{b.getIndexAttr(1), b.getIndexAttr(1)};
    auto type = memref::SubViewOp::inferRankReducedResultType(
        {kWsRows}, cast<MemRefType>(lse.getType()), offsets, sizes, strides);
    return memref::SubViewOp::create(b, loc, cast<MemRefType>(type), lse,
                                     offsets, sizes, strides);
  }

  Value zeros(int64_t n) {
    auto t = VectorType::get({n / 2}, b.getF32Type());
    return splat(t, b.getF32FloatAttr(0));
  }

  sg::WgmmaOp wgmma(Value aTile, Value aRegs, Value bTile, Value acc,
                    int64_t n, int64_t k, StringRef aMajor, StringRef bMajor,
                    int64_t aRow, int64_t aCol, int64_t bRow, int64_t bCol) {
    auto type = VectorType::get({n / 2}, b.getF32Type());
    return sg::WgmmaOp::create(
        b, loc, type, aTile, aRegs, bTile, acc, b.getI64IntegerAttr(n),
        b.getI64IntegerAttr(k), b.getStringAttr(aMajor),
        b.getStringAttr(bMajor), b.getI64IntegerAttr(aRow),
        b.getI64IntegerAttr(aCol), b.getI64IntegerAttr(bRow),
        b.getI64IntegerAttr(bCol));
  }

  SmallVector<Value> wait(int64_t pending, ValueRange frags) {
    auto op = sg::WgmmaWaitOp::create(b, loc, frags.getTypes(),
                                      b.getI64IntegerAttr(pending), frags);
    return SmallVector<Value>(op.getResults());
  }

  void softmaxRole() {
    auto frag = VectorType::get({kWsKeys / 2}, b.getF32Type());
    Value counters = s.softmax.getCounters();
    // Delta of the CTA's rows into shared memory, then this role's
    // barrier: every thread reads rows other threads summed.
    IRMapping map;
    map.map(s.delta.getDelta(), deltaBuf);
    b.clone(*s.delta, map);
    NVVM::BarrierOp::create(
        b, loc, TypeRange{},
        arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(kDeltaBarrier)),
        arith::ConstantOp::create(
            b, loc, b.getI32IntegerAttr(sg::kWarpgroupThreads)),
        /*reductionOp=*/{}, /*reductionPredicate=*/Value());
    b.clone(*s.live); // counts the dead rows
    auto nAttr = b.getI64IntegerAttr(kWsKeys);
    Value lse = sg::FragmentRowsOp::create(b, loc, frag, lseRow(), nAttr);
    if (s.softmax.getBase() == LseBase::BaseE)
      lse = arith::MulFOp::create(b, loc, lse,
                                  splat(frag, b.getF32FloatAttr(kLog2e)));
    Value delta = sg::FragmentRowsOp::create(b, loc, frag, deltaBuf, nAttr);
    // A row is live when its lse is finite (smla.row_live's rule).
    Value live = arith::CmpFOp::create(
        b, loc, arith::CmpFPredicate::OLT, math::AbsFOp::create(b, loc, lse),
        splat(frag, b.getF32FloatAttr(APFloat::getInf(
                        APFloat::IEEEsingle()).convertToFloat())));
    Value scale = runtimeScale(s.softmax);
    if (!scale)
      scale = f32(s.softmax.getScale().convertToFloat());
    Value scaleLog2 = arith::MulFOp::create(b, loc, scale, f32(kLog2e));
    Value scaleV = vector::BroadcastOp::create(b, loc, frag, scale);
    Value scaleLog2V = vector::BroadcastOp::create(b, loc, frag, scaleLog2);
    float clampValue = s.softmax.getClamp()->convertToFloat();
    Value clamp = splat(frag, b.getF32FloatAttr(clampValue));
    Value zero = splat(frag, b.getF32FloatAttr(0));
    int64_t dqN = kWsSoftmaxDqColumns;

    sg::ConsumerWaitOp::create(b, loc, rowsPipe, c(0));
    scf::ForOp loop = blockLoop(
        {zeros(dqN)}, [&](Value iv, ValueRange args) -> SmallVector<Value> {
          Value use = blockUse(iv);
          sg::ConsumerWaitOp::create(b, loc, keysPipe, use);
          Value sAcc = wgmma(qTile, {}, keyTile, {}, kWsKeys, w, "k", "k", 0,
                             0, 0, 0);
          Value dpAcc = wgmma(doTile, {}, keyTile, {}, kWsKeys, d, "k", "k",
                              0, 0, 0, 0);
          SmallVector<Value> sd = wait(0, {sAcc, dpAcc});
          // The guarded softmax: x2 = s * scale * log2e - lse2, P =
          // select(slot valid and row live, exp2(min(x2, clamp)), 0).
          Value slot = sg::FragmentColumnsOp::create(
              b, loc, VectorType::get({kWsKeys / 2}, b.getI32Type()), slots,
              nAttr);
          Value valid = arith::CmpIOp::create(
              b, loc, arith::CmpIPredicate::sge, slot,
              splat(cast<VectorType>(slot.getType()), b.getI32IntegerAttr(0)));
          Value ok = arith::AndIOp::create(b, loc, valid, live);
          Value x2 = arith::SubFOp::create(
              b, loc, arith::MulFOp::create(b, loc, sd[0], scaleLog2V), lse);
          Value e = math::Exp2Op::create(
              b, loc, arith::MinimumFOp::create(b, loc, x2, clamp));
          Value p = arith::SelectOp::create(b, loc, ok, e, zero);
          if (counters) {
            Value over = arith::CmpFOp::create(
                b, loc, arith::CmpFPredicate::OGT, x2, clamp);
            sg::CountOp::create(b, loc, arith::AndIOp::create(b, loc, ok, over),
                                counters, b.getI64IntegerAttr(kClamped));
          }
          // dS = P (dP - Delta) scale, exactly 0 where P is 0.
          Value nonzero = arith::CmpFOp::create(
              b, loc, arith::CmpFPredicate::UNE, p, zero);
          Value dsv = arith::MulFOp::create(
              b, loc,
              arith::MulFOp::create(
                  b, loc, p, arith::SubFOp::create(b, loc, sd[1], delta)),
              scaleV);
          Value ds = arith::SelectOp::create(b, loc, nonzero, dsv, zero);
          // P^T and dS^T (keys x heads) for the dKV role.
          sg::ProducerAcquireOp::create(b, loc, pdsPipe, use);
          auto store = [&](Value v, Value t) {
            sg::StoreFragmentOp::create(b, loc, v, t, b.getUnitAttr(),
                                        b.getI64IntegerAttr(0),
                                        b.getI64IntegerAttr(0));
          };
          store(p, pTile);
          store(ds, dsTile);
          sg::ProducerCommitOp::create(b, loc, pdsPipe, use);
          // dQ[:, 0:256] += dS K, dS in registers.
          Value a = sg::PackOperandOp::create(
              b, loc, VectorType::get({kWsKeys / 4}, b.getI32Type()), ds);
          Value dq = wgmma({}, a, keyTile, args[0], dqN, kWsKeys, "k", "mn",
                           0, 0, 0, 0);
          Value rowSlots = slotsOfRows();
          // This role's own P^T and dS^T stores, visible to all its warps.
          sg::ConsumerWaitOp::create(b, loc, pdsPipe, use);
          dq = wait(0, {dq})[0];
          sg::ConsumerReleaseOp::create(b, loc, keysPipe, use);
          // Its dKV chunks fill the next block's gather.
          dkvChunks(firstSoftmaxChunk(), w / 64, rowSlots, /*depth=*/2);
          sg::ConsumerReleaseOp::create(b, loc, pdsPipe, use);
          return {dq};
        });
    sg::StoreRowsOp::create(b, loc, loop.getResult(0), s.store.getDq(),
                            s.store.getToken(),
                            headRow(s.store.getHeadBlock()),
                            b.getI64IntegerAttr(0));
  }

  /// The dKV role's dQ columns [256, W) as products of at most 256
  /// columns, each a multiple of 64 wide: (first column, width).
  SmallVector<std::pair<int64_t, int64_t>> dkvDqParts() {
    // The B operand is mn-major: each product starts a 64-column slab.
    int64_t rest = w - kWsSoftmaxDqColumns;
    int64_t parts = (rest + 255) / 256;
    int64_t width = llvm::alignTo((rest + parts - 1) / parts, 64);
    SmallVector<std::pair<int64_t, int64_t>> out;
    for (int64_t col = kWsSoftmaxDqColumns; col < w; col += width)
      out.push_back({col, std::min(width, w - col)});
    return out;
  }

  /// The slot of each row (key) of a dKV fragment, read while the key
  /// stage (whose slots they are) is still this block's.
  Value slotsOfRows() {
    return sg::FragmentRowsOp::create(
        b, loc, VectorType::get({kWsKeys / 2}, b.getI32Type()), slots,
        b.getI64IntegerAttr(kWsKeys));
  }

  /// The first of the 64-column dKV chunks that the softmax role reduces
  /// (the dkv role takes the ones before it).
  int64_t firstSoftmaxChunk() {
    return std::max<int64_t>(0, w / 64 - softmaxChunks);
  }

  /// dKV chunks [first, last) of 64 columns: dS^T q (+ P^T do below D),
  /// each reduced into dkv at the rows' slots. With depth 2 the next
  /// chunk's products are issued before this chunk's reduction, so the
  /// tensor cores work while the reductions issue.
  void dkvChunks(int64_t first, int64_t last, Value rowSlots, int64_t depth) {
    Value dkv = s.scatter.getDkv(), group = s.scatter.getGroup();
    // 64 columns per chunk: the widest wgmma B operand of the mn-major q
    // and do tiles at their 128-byte swizzle (one swizzle atom).
    SmallVector<int64_t> cols;
    for (int64_t col = 64 * first; col < std::min(w, 64 * last); col += 64)
      cols.push_back(col);
    auto issue = [&](int64_t col) -> std::pair<Value, int64_t> {
      int64_t n = 64;
      Value acc =
          wgmma(dsTile, {}, qTile, {}, n, kWsRows, "k", "mn", 0, 0, 0, col);
      if (col >= d)
        return {acc, 1};
      return {wgmma(pTile, {}, doTile, acc, n, kWsRows, "k", "mn", 0, 0, 0,
                    col),
              2};
    };
    std::pair<Value, int64_t> next;
    if (!cols.empty() && depth > 1)
      next = issue(cols.front());
    for (size_t i = 0; i < cols.size(); ++i) {
      std::pair<Value, int64_t> cur = depth > 1 ? next : issue(cols[i]);
      int64_t pending = 0;
      if (depth > 1 && i + 1 < cols.size()) {
        next = issue(cols[i + 1]);
        pending = next.second;
      }
      Value acc = wait(pending, {cur.first})[0];
      sg::ReduceDkvOp::create(b, loc, acc, rowSlots, dkv, group,
                              b.getI64IntegerAttr(cols[i]));
    }
  }

  void dkvRole() {
    auto parts = dkvDqParts();
    SmallVector<Value> inits;
    for (auto [col, n] : parts)
      inits.push_back(zeros(n));
    sg::ConsumerWaitOp::create(b, loc, rowsPipe, c(0));
    scf::ForOp loop = blockLoop(
        inits, [&](Value iv, ValueRange args) -> SmallVector<Value> {
          Value use = blockUse(iv);
          sg::ConsumerWaitOp::create(b, loc, pdsPipe, use);
          // dQ[:, 256:W] += dS K: A = dS from the dS^T tile (mn-major).
          SmallVector<Value> dq;
          for (auto [i, part] : llvm::enumerate(parts))
            dq.push_back(wgmma(dsTile, {}, keyTile, args[i], part.second,
                               kWsKeys, "mn", "mn", 0, 0, 0, part.first));
          Value rowSlots = slotsOfRows();
          dq = wait(0, dq);
          sg::ConsumerReleaseOp::create(b, loc, keysPipe, use);
          dkvChunks(0, firstSoftmaxChunk(), rowSlots, dkvDepth);
          sg::ConsumerReleaseOp::create(b, loc, pdsPipe, use);
          return dq;
        });
    for (auto [i, part] : llvm::enumerate(parts))
      sg::StoreRowsOp::create(b, loc, loop.getResult(i), s.store.getDq(),
                              s.store.getToken(),
                              headRow(s.store.getHeadBlock()),
                              b.getI64IntegerAttr(part.first));
  }

  /// The tile ops the roles replace, and the scratch only they used.
  void eraseStep() {
    s.store->erase();
    s.loop->erase();
    s.live->erase();
    s.delta->erase();
    for (linalg::FillOp f : s.fills)
      if (isa_and_nonnull<memref::AllocaOp, memref::SubViewOp>(
              f.getOutputs()[0].getDefiningOp()))
        f->erase();
    // Scratch tiles (and their views) that nothing reads any more.
    for (bool changed = true; changed;) {
      SmallVector<Operation *> dead;
      func.walk([&](Operation *op) {
        if (isa<memref::AllocaOp, memref::SubViewOp>(op) && op->use_empty())
          dead.push_back(op);
      });
      for (Operation *op : dead)
        op->erase();
      changed = !dead.empty();
    }
  }

  gpu::GPUFuncOp func;
  Step s;
  OpBuilder b;
  Location loc;
  int64_t w = 0, d = 0;
  int64_t softmaxChunks, dkvDepth;
  Value qTile, doTile, keyTile, pTile, dsTile, slots, deltaBuf;
  Value rowsPipe, keysPipe, pdsPipe;
};

struct SMLAScheduleWarpSpecializedPass
    : public mlir::smla::impl::SMLAScheduleWarpSpecializedBase<
          SMLAScheduleWarpSpecializedPass> {
  using Base::Base;
  void runOnOperation() override {
    if (softmaxChunks < 0 || dkvDepth < 1 || dkvDepth > 2) {
      getOperation().emitError()
          << "smla-schedule-warp-specialized: softmax-chunks must be >= 0 "
             "and dkv-depth 1 or 2";
      return signalPassFailure();
    }
    SmallVector<gpu::GPUFuncOp> kernels;
    getOperation().walk([&](gpu::GPUFuncOp f) {
      auto kind = f->getAttrOfType<StringAttr>(kKernelKindAttr);
      if (kind && kind.getValue() == "bwd")
        kernels.push_back(f);
    });
    for (gpu::GPUFuncOp f : kernels) {
      std::string why = whyNotWarpSpecialized(f);
      if (!why.empty()) {
        f.emitOpError() << "cannot take the warp-specialized schedule: "
                        << why;
        return signalPassFailure();
      }
      std::string unused;
      FailureOr<Step> step = findWarpSpecializedStep(f, unused);
      if (failed(Scheduler(f, *step, softmaxChunks, dkvDepth)
                     .run()))
        return signalPassFailure();
    }
  }
};
} // namespace
