//===- LowerTileOps.cpp - smla tile ops to CTA-cooperative code -----------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Every tile op inside a gpu.func becomes code that all threads of the CTA
// run; the barriers between them are placed beforehand from the ops'
// shared-memory footprints (Barriers.cpp). The guards stay explicit: the
// gather's cp.async reads from row select(mask, idx, 0) with a source size of
// select(mask, 16, 0) bytes; the scatter's red.global.add.v4.f32 is
// predicated by the mask; exp2 is fed by a clamp and consumed by a select.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"
#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

#include "llvm/ADT/TypeSwitch.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLALOWERTONVVM
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
/// Lowers the tile ops of one gpu.func.
class FuncLowering {
public:
  FuncLowering(gpu::GPUFuncOp func, bool mma) : func(func), mma(mma) {
    auto block = func.getKnownBlockSize();
    threads = block ? (*block)[0] : 256;
  }

  LogicalResult run() {
    SmallVector<Operation *> ops;
    func.walk([&](Operation *op) {
      if (isa<SMLADialect>(op->getDialect()) || isa<linalg::FillOp>(op))
        ops.push_back(op);
    });
    if (ops.empty())
      return success();
    OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
    tid = gpu::ThreadIdOp::create(b, func.getLoc(), gpu::Dimension::x);
    if (failed(placeDqRegisters(b)))
      return failure();
    for (Operation *op : ops)
      if (failed(lower(op)))
        return failure();
    for (Operation *op : llvm::reverse(ops)) {
      if (!op->use_empty())
        return op->emitOpError() << "still has uses after lowering";
      op->erase();
    }
    // The S and dP tiles of a fused epilogue are never touched: their
    // allocas (and views) go with the ops that named them.
    SmallVector<memref::AllocaOp> deadTiles;
    func.walk([&](memref::AllocaOp a) {
      if (a->hasAttr(kFusedEpilogueAttr))
        deadTiles.push_back(a);
    });
    for (memref::AllocaOp a : deadTiles) {
      for (Operation *user : llvm::make_early_inc_range(a->getUsers())) {
        if (!user->use_empty())
          return user->emitOpError() << "still has uses after lowering";
        user->erase();
      }
      a->erase();
    }
    // The accumulators in registers leave their (sub)view chain unused.
    for (Value acc : dqViews) {
      for (Operation *def = acc.getDefiningOp(); def;) {
        if (!def->use_empty())
          return def->emitOpError() << "still has uses after lowering";
        Operation *next = def->getNumOperands()
                              ? def->getOperand(0).getDefiningOp()
                              : nullptr;
        bool root = isa<memref::AllocaOp>(def);
        def->erase();
        if (root)
          break;
        def = next;
      }
    }
    return success();
  }

private:
  /// The dQ accumulators smla-gpu-map planned in registers
  /// (kDqRegistersAttr on their alloca): a private array each. The mark
  /// is checked against the op: a wrong slot count would leave column
  /// pairs unaccumulated.
  LogicalResult placeDqRegisters(OpBuilder &b) {
    WalkResult r = func.walk([&](Operation *op) {
      auto dq = dyn_cast<DqAccumulateOp>(op);
      auto packed = dyn_cast<DqPackedOp>(op);
      if (!dq && !packed)
        return WalkResult::advance();
      Value acc = dq ? dq.getAcc() : packed.getAcc();
      memref::AllocaOp a = rootAlloca(acc);
      auto slots =
          a ? a->getAttrOfType<IntegerAttr>(kDqRegistersAttr) : IntegerAttr();
      if (!slots || dqRegs.count(acc))
        return WalkResult::advance();
      auto refuse = [&](StringRef why) {
        a.emitOpError() << "is a dQ accumulator planned in registers ("
                        << kDqRegistersAttr << "), " << why;
        return WalkResult::interrupt();
      };
      if (!mma)
        return refuse("which needs the mma lowering");
      if (soleRootAlloca(acc) != a)
        return refuse("but has more than one view");
      int64_t want =
          dq ? dqRegisterSlots(dq, threads)
             : dqPackedSlots(cast<MemRefType>(acc.getType()).getDimSize(1));
      if (slots.getInt() != want)
        return refuse("but its column pairs per warp do not match the op's");
      dqRegs[acc] = {allocDqRegisters(b, func.getLoc(), slots.getInt()),
                     slots.getInt()};
      dqViews.push_back(acc);
      return WalkResult::advance();
    });
    return failure(r.wasInterrupted());
  }

  LogicalResult lower(Operation *op) {
    OpBuilder b(op);
    CtaEmitter e(b, op->getLoc(), tid, threads);
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case<IndexLoadOp, IndexMaskOp, IndexPairOp, RowLiveOp, GatherOp,
              SoftmaxOp, DScoresOp, ScatterDkvOp, PackDkvOp, ScatterPackedOp,
              DeltaOp, StoreDqOp, CastDkvOp, linalg::FillOp>(
            [&](auto typed) { return lowerOp(e, typed); })
        .Case([&](TileDotOp typed) -> LogicalResult {
          if (fusedAway.contains(typed))
            return success();
          if (typed->hasAttr(kFusedEpilogueAttr)) {
            auto next = dyn_cast_or_null<TileDotOp>(typed->getNextNode());
            if (!next)
              return typed.emitOpError() << "is a fused epilogue's tile_dot "
                                            "without its pair";
            if (!mma)
              return typed.emitOpError() << "starts a fused epilogue, which "
                                            "needs the mma lowering";
            return lowerFusedEpilogueRun(e, typed, next, lanes, fusedAway);
          }
          // Both block products, next to each other with no barrier
          // between them: one pass over the key tile.
          auto next = dyn_cast_or_null<TileDotOp>(typed->getNextNode());
          bool fuse = mma && next && canFuseTileDots(typed, next);
          // The swizzled key tile is read by the wgmma pair alone.
          if (swizzledKeys(typed.getTile()) &&
              !(fuse && canUseWgmmaDots(typed, next, threads)))
            return typed.emitOpError()
                   << "reads the swizzled key tile: only the wgmma form "
                      "of the block products can";
          if (fuse) {
            lowerTileDotPair(e, typed, next);
            fusedAway.insert(next);
            return success();
          }
          lowerTileDot(e, typed, mma);
          return success();
        })
        .Case([&](ClusterInitOp typed) {
          lowerClusterInit(e, typed);
          return success();
        })
        .Case([&](PairUnionOp typed) {
          lowerPairUnion(e, typed);
          return success();
        })
        .Case([&](DqPackedOp typed) -> LogicalResult {
          Value regs = dqRegs.lookup(typed.getAcc()).first;
          if (!mma || threads != 512 || !regs || !swizzledKeys(typed.getTile()))
            return typed.emitOpError()
                   << "needs the mma lowering, 512 threads, the swizzled "
                      "key tile and its accumulator in registers";
          lowerDqPacked(e, typed, regs);
          return success();
        })
        .Case([&](DqAccumulateOp typed) -> LogicalResult {
          if (swizzledKeys(typed.getTile()))
            return typed.emitOpError()
                   << "reads the swizzled key tile: only dq_packed can";
          auto regs = dqRegs.lookup(typed.getAcc());
          lowerDqAccumulate(e, typed, mma, regs.first, regs.second);
          return success();
        })
        .Default([](Operation *o) {
          return o->emitOpError() << "has no GPU lowering";
        });
  }

  Value lane(Value vec, OpBuilder &b, Location loc, Value j) {
    return lanes.lookup(vec)(b, loc, j);
  }

  // Index blocks, their masks and pairs, and live rows become lane
  // functions (LowerLanes.cpp), emitted where a later op reads a lane.
  LogicalResult lowerOp(CtaEmitter &, IndexLoadOp op) {
    lowerIndexLoadLanes(op, lanes);
    return success();
  }
  LogicalResult lowerOp(CtaEmitter &e, IndexMaskOp op) {
    lowerIndexMaskLanes(e, op, lanes);
    return success();
  }
  LogicalResult lowerOp(CtaEmitter &, IndexPairOp op) {
    lowerIndexPairLanes(op, lanes);
    return success();
  }
  LogicalResult lowerOp(CtaEmitter &e, RowLiveOp op) {
    lowerRowLiveLanes(e, op, lanes);
    return success();
  }

  // The key gather (LowerGather.cpp).
  LogicalResult lowerOp(CtaEmitter &e, GatherOp op) {
    return lowerGather(e, op, lanes.lookup(op.getMask()),
                       lanes.lookup(op.getIndices()));
  }

  // Softmax and dS (LowerSoftmax.cpp).
  LogicalResult lowerOp(CtaEmitter &e, SoftmaxOp op) {
    if (fusedAway.contains(op))
      return success();
    return lowerSoftmax(e, op, lanes);
  }
  LogicalResult lowerOp(CtaEmitter &e, DScoresOp op) {
    if (!fusedAway.contains(op))
      lowerDScores(e, op);
    return success();
  }

  /// sum_h coef[h, j] * rows[t, g*hg + h, c .. c+4), as vector<4xf32>.
  static Value headSum(OpBuilder &b, Location loc, ScatterDkvOp op, Value coef,
                       Value rows, Value j, Value c, Value init) {
    int64_t hg = op.getDs().getType().getDimSize(0);
    auto v4 = VectorType::get({4}, b.getF32Type());
    Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
    Value c1 = arith::ConstantIndexOp::create(b, loc, 1);
    Value n = arith::ConstantIndexOp::create(b, loc, hg);
    return emitReduce(
        b, loc, c0, n, c1, init, [&](OpBuilder &b, Value h, Value acc) {
          Value w = memref::LoadOp::create(b, loc, coef, ValueRange{h, j});
          Value head = headIndex(b, loc, op.getHeadBlock(), hg, h);
          Value x = loadVecF32(b, loc, rows, {op.getToken(), head, c}, 4);
          Value wv = vector::BroadcastOp::create(b, loc, v4, w);
          return vector::FMAOp::create(b, loc, wv, x, acc);
        });
  }

  // The deferred dKV scatter on wgmma (LowerScatterWgmma.cpp).
  LogicalResult lowerOp(CtaEmitter &e, PackDkvOp op) {
    if (fusedAway.contains(op))
      return success();
    if (!mma || e.threads != 512)
      return op.emitOpError() << "needs the mma lowering and 512 threads";
    lowerPackDkv(e, op, lanes.lookup(op.getMask()),
                 lanes.lookup(op.getIndices()));
    return success();
  }
  LogicalResult lowerOp(CtaEmitter &e, ScatterPackedOp op) {
    if (!mma || e.threads != 512 || !canonicalRow(op.getQ()) ||
        op.getQ().getType().getDimSize(2) / op.getChunks() !=
            kWgmmaChunkColumns)
      return op.emitOpError() << "needs the mma lowering, 512 threads, the "
                                 "canonical [q; do] tile and chunks of "
                              << kWgmmaChunkColumns << " columns";
    // Its named barrier pairs with the run's (LowerEpilogueWgmma.cpp),
    // which looks for the mark on the op right before its first tile_dot;
    // the chunk whose mark is 1 (right before the run) arrives.
    Operation *next = op->getNextNode();
    while (op->hasAttr(kOverlapRunAttr) && next && isa<ScatterPackedOp>(next) &&
           next->hasAttr(kOverlapRunAttr))
      next = next->getNextNode();
    auto place = op->getAttrOfType<IntegerAttr>(kOverlapRunAttr);
    if (op->hasAttr(kOverlapRunAttr) &&
        (!place || place.getInt() < 1 ||
         (place.getInt() == 1) != (next == op->getNextNode())))
      return op->emitOpError()
             << "runs alongside a fused epilogue but its " << kOverlapRunAttr
             << " is not its place before the run";
    if (op->hasAttr(kOverlapRunAttr) && !(isa_and_nonnull<TileDotOp>(next) &&
                                          next->hasAttr(kFusedEpilogueAttr)))
      return op.emitOpError()
             << "runs alongside a fused epilogue (" << kOverlapRunAttr
             << ") but is not right before its first tile_dot";
    lowerScatterPacked(e, op);
    return success();
  }

  LogicalResult lowerOp(CtaEmitter &e, ScatterDkvOp op) {
    auto dkvType = op.getDkv().getType();
    int64_t block = op.getDs().getType().getDimSize(1);
    int64_t width = dkvType.getDimSize(2);
    int64_t d = op.getDout().getType().getDimSize(2);
    if (width % 4 || d % 4 || dkvType.isDynamicDim(1) ||
        dkvType.isDynamicDim(2))
      return op.emitOpError() << "GPU scatter needs static dkv widths that "
                                 "are multiples of 4";
    auto laneOf = [&](Value vec) -> LaneFn { return lanes.lookup(vec); };
    if (canonicalRow(op.getQ()) || canonicalRow(op.getDout()))
      return op.emitOpError() << "reads the canonical [q; do] tile: only "
                                 "its wgmma form (smla-defer-scatter: "
                                 "pack_dkv and scatter_packed) can";
    if (mma && canUseMma(op, e.threads)) {
      lowerScatterDkvMma(e, op, laneOf(op.getMask()), laneOf(op.getIndices()));
      return success();
    }
    e.ctaLoop(block * (width / 4), [&](OpBuilder &b, Value q) {
      Location loc = e.loc;
      auto [j, c] = splitQuad(b, loc, q, width);
      auto v4 = VectorType::get({4}, b.getF32Type());
      Value zeros = arith::ConstantOp::create(
          b, loc, DenseElementsAttr::get(v4, b.getF32FloatAttr(0)));
      Value acc = headSum(b, loc, op, op.getDs(), op.getQ(), j, c, zeros);
      Value inV =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, c,
                                arith::ConstantIndexOp::create(b, loc, d));
      auto ifOp = scf::IfOp::create(
          b, loc, inV,
          [&](OpBuilder &nb, Location l) {
            scf::YieldOp::create(
                nb, l,
                headSum(nb, l, op, op.getProbs(), op.getDout(), j, c, acc));
          },
          [&](OpBuilder &nb, Location l) { scf::YieldOp::create(nb, l, acc); });
      acc = ifOp.getResult(0);
      // A masked lane adds nothing and its index never becomes an address.
      Value valid = lane(op.getMask(), b, loc, j);
      Value raw = lane(op.getIndices(), b, loc, j);
      SmallVector<Value> four;
      for (int64_t i = 0; i < 4; ++i)
        four.push_back(vector::ExtractOp::create(b, loc, acc, i));
      emitMaskedRed(b, loc, op.getDkv(), op.getGroup(), valid, raw, c, four);
    });
    return success();
  }

  LogicalResult lowerOp(CtaEmitter &e, DeltaOp op) {
    return lowerDelta(e, op);
  }

  /// The indices of 4-wide chunk `q` of the static shape `type`.
  static SmallVector<Value> chunkIndices(OpBuilder &b, Location loc,
                                         MemRefType type, Value q) {
    ArrayRef<int64_t> shape = type.getShape();
    SmallVector<Value> idx(shape.size());
    Value rest = q;
    for (int64_t i = shape.size() - 1; i >= 0; --i) {
      int64_t n = i + 1 == (int64_t)shape.size() ? shape[i] / 4 : shape[i];
      Value nv = arith::ConstantIndexOp::create(b, loc, n);
      idx[i] = arith::RemUIOp::create(b, loc, rest, nv);
      rest = arith::DivUIOp::create(b, loc, rest, nv);
    }
    idx.back() = arith::MulIOp::create(
        b, loc, idx.back(), arith::ConstantIndexOp::create(b, loc, 4));
    return idx;
  }

  /// for every 4-wide chunk of the static shape `type`: fn(indices)
  static void forEachChunk(CtaEmitter &e, MemRefType type,
                           function_ref<void(OpBuilder &, ValueRange)> fn) {
    e.ctaLoop(type.getNumElements() / 4, [&](OpBuilder &b, Value q) {
      fn(b, chunkIndices(b, e.loc, type, q));
    });
  }

  /// forEachChunk where fn returns an i1: the OR over the thread's chunks.
  static Value anyChunk(CtaEmitter &e, MemRefType type,
                        function_ref<Value(OpBuilder &, ValueRange)> fn) {
    Value no = arith::ConstantOp::create(e.b, e.loc, e.b.getBoolAttr(false));
    return emitReduce(
        e.b, e.loc, e.tid, e.index(type.getNumElements() / 4),
        e.index(e.threads), no, [&](OpBuilder &b, Value q, Value acc) {
          Value flag = fn(b, chunkIndices(b, e.loc, type, q));
          return arith::OrIOp::create(b, e.loc, acc, flag).getResult();
        });
  }

  /// Stores with `store` (which returns the stored value) over the chunks
  /// of `type`; with `counters`, flags the non-finite stored values and
  /// counts the non-finite rows of the result (emitNonFiniteRowCount).
  static void storeChunks(CtaEmitter &e, MemRefType type, Value counters,
                          int64_t rows, int64_t width,
                          function_ref<Value(OpBuilder &, ValueRange)> store,
                          const RowLoadFn &load) {
    if (!counters) {
      forEachChunk(e, type, [&](OpBuilder &b, ValueRange idx) {
        (void)store(b, idx);
      });
      return;
    }
    Value flagged = anyChunk(e, type, [&](OpBuilder &b, ValueRange idx) {
      return isNonFinite(b, e.loc, store(b, idx));
    });
    emitNonFiniteRowCount(e, counters, flagged, rows, width, load);
  }

  static bool chunkable(MemRefType type) {
    return type.hasStaticShape() &&
           type.getDimSize(type.getRank() - 1) % 4 == 0;
  }

  LogicalResult lowerOp(CtaEmitter &e, linalg::FillOp op) {
    if (auto regs = dqRegs.lookup(op.getOutputs()[0]); regs.first) {
      zeroDqRegisters(e, regs.first, regs.second);
      return success();
    }
    auto type = dyn_cast<MemRefType>(op.getOutputs()[0].getType());
    if (!type || !chunkable(type))
      return op.emitOpError() << "GPU fill needs a static memref whose last "
                                 "dimension is a multiple of 4";
    Value value = op.getInputs()[0], out = op.getOutputs()[0];
    auto vt = VectorType::get({4}, type.getElementType());
    forEachChunk(e, type, [&](OpBuilder &b, ValueRange idx) {
      Value v = vector::BroadcastOp::create(b, e.loc, vt, value);
      vector::StoreOp::create(b, e.loc, v, out, idx);
    });
    return success();
  }

  LogicalResult lowerOp(CtaEmitter &e, CastDkvOp op) {
    MemRefType type = op.getAccum().getType();
    if (!chunkable(type))
      return op.emitOpError() << "GPU cast needs a static row slice";
    // One kv row: [1, G, W]. Without dkv the f32 result is only counted.
    Value dkv = op.getDkv(), result = dkv ? dkv : op.getAccum();
    storeChunks(
        e, type, op.getCounters(), type.getDimSize(1), type.getDimSize(2),
        [&](OpBuilder &b, ValueRange idx) -> Value {
          Value v = loadVecF32(b, e.loc, op.getAccum(), idx, 4);
          if (!dkv)
            return v;
          auto vt =
              VectorType::get({4}, cast<MemRefType>(dkv.getType()).getElementType());
          v = arith::TruncFOp::create(b, e.loc, vt, v);
          vector::StoreOp::create(b, e.loc, v, dkv, idx);
          return v;
        },
        [&](OpBuilder &b, Location l, Value g, Value c) -> Value {
          Value c0 = arith::ConstantIndexOp::create(b, l, 0);
          return memref::LoadOp::create(b, l, result, ValueRange{c0, g, c});
        });
    return success();
  }

  LogicalResult lowerOp(CtaEmitter &e, StoreDqOp op) {
    MemRefType acc = op.getAcc().getType();
    int64_t hg = acc.getDimSize(0), w = acc.getDimSize(1);
    Value counters = op.getCounters();
    // The dq rows of this op, re-read by the non-finite row count.
    RowLoadFn dqRow = [&](OpBuilder &b, Location l, Value h, Value c) -> Value {
      Value head = headIndex(b, l, op.getHeadBlock(), hg, h);
      return memref::LoadOp::create(b, l, op.getDq(),
                                    ValueRange{op.getToken(), head, c});
    };
    Type elem = op.getDq().getType().getElementType();
    if (auto regs = dqRegs.lookup(op.getAcc()); regs.first) {
      // The array's layout is that of the ops that accumulate into it.
      bool packed = llvm::any_of(op.getAcc().getUsers(), [](Operation *u) {
        return isa<DqPackedOp>(u);
      });
      // With counters, each stored value is flagged where it is stored
      // (no register lives longer than the store needs it).
      std::optional<NonFiniteFlag> flag;
      if (counters)
        flag.emplace(e.b, e.loc, op);
      NonFiniteFlag *f = flag ? &*flag : nullptr;
      if (packed)
        storeDqPackedRegisters(e, op, regs.first, f);
      else
        storeDqRegisters(e, op, regs.first, regs.second, f);
      if (counters)
        emitNonFiniteRowCount(e, counters, flag->get(e.b, e.loc), hg, w, dqRow);
      return success();
    }
    if (!chunkable(acc))
      return op.emitOpError() << "GPU store_dq needs a width multiple of 4";
    storeChunks(
        e, acc, counters, hg, w,
        [&](OpBuilder &b, ValueRange idx) -> Value {
          Value v = vector::LoadOp::create(
              b, e.loc, VectorType::get({4}, b.getF32Type()), op.getAcc(), idx);
          if (!elem.isF32())
            v = arith::TruncFOp::create(b, e.loc, VectorType::get({4}, elem), v);
          Value head = headIndex(b, e.loc, op.getHeadBlock(), hg, idx[0]);
          vector::StoreOp::create(b, e.loc, v, op.getDq(),
                                  ValueRange{op.getToken(), head, idx[1]});
          return v;
        },
        dqRow);
    return success();
  }

  gpu::GPUFuncOp func;
  bool mma;
  int64_t threads = 256;
  Value tid;
  LaneMap lanes;
  /// The second tile_dot of a pair lowered together with the first.
  DenseSet<Operation *> fusedAway;
  /// dQ accumulator -> (private array, column pairs per warp).
  DenseMap<Value, std::pair<Value, int64_t>> dqRegs;
  /// Their accumulator operands.
  SmallVector<Value> dqViews;
};

struct SMLALowerToNVVMPass
    : public mlir::smla::impl::SMLALowerToNVVMBase<SMLALowerToNVVMPass> {
  using Base::Base;
  void runOnOperation() override {
    // smla-compile --mma=false marks the enclosing module with
    // `smla.mma = false`; it overrides the option (CUDA-core fallback).
    bool withMma = mmaEnabled(getOperation(), mma);
    for (auto func : getOperation().getOps<gpu::GPUFuncOp>()) {
      // Barriers go between the tile ops before they are lowered: their
      // shared-memory footprints are only visible at this level.
      insertTileBarriers(func);
      if (failed(FuncLowering(func, withMma).run()))
        return signalPassFailure();
    }
  }
};
} // namespace
