//===- Barriers.cpp - CTA barriers where shared-memory tiles need them ----===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// The tile ops of a kernel are CTA-cooperative: a tile one op writes is read
// by other threads in a later op. A `gpu.barrier` is needed between two ops
// only when they touch overlapping shared-memory bytes and one of them
// writes (read-after-write, write-after-read, write-after-write), unless the
// dependence stays inside one thread. The tile lowerings emit no barriers of
// their own; this pass places them from the ops' shared-memory footprints,
// which are byte ranges of the dynamic shared-memory buffer after
// smla-allocate-smem, so two tiles that share storage are seen to conflict.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLAINSERTBARRIERS
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
/// One shared-memory access of a tile op.
struct Access {
  int64_t begin, end; // byte range in the dynamic shared-memory buffer
  bool write;
  Operation *op;
  Value buffer; // the memref operand it came from
};

/// Byte range of a workgroup memref: the `memref.view` of the shared-memory
/// buffer it comes from (through casts). Unknown origin: the whole buffer.
/// A dQ accumulator planned in registers (kDqRegistersAttr) has none: each
/// thread keeps its own elements.
std::optional<std::pair<int64_t, int64_t>> footprint(Value v) {
  auto type = dyn_cast<MemRefType>(v.getType());
  if (!type ||
      !gpu::GPUDialect::isWorkgroupMemoryAddressSpace(type.getMemorySpace()))
    return std::nullopt;
  if (auto a = rootAlloca(v); a && a->hasAttr(kDqRegistersAttr))
    return std::nullopt;
  while (true) {
    if (auto cast = v.getDefiningOp<memref::ReinterpretCastOp>()) {
      v = cast.getSource();
      continue;
    }
    if (auto cast = v.getDefiningOp<memref::CastOp>()) {
      v = cast.getSource();
      continue;
    }
    if (auto sub = v.getDefiningOp<memref::SubViewOp>()) {
      v = sub.getSource();
      continue;
    }
    break;
  }
  auto view = v.getDefiningOp<memref::ViewOp>();
  APInt offset;
  if (view && view.getType().hasStaticShape() &&
      matchPattern(view.getByteShift(), m_ConstantInt(&offset))) {
    MemRefType t = view.getType();
    int64_t bytes =
        t.getNumElements() * llvm::divideCeil(t.getElementTypeBitWidth(), 8);
    return std::pair{offset.getSExtValue(), offset.getSExtValue() + bytes};
  }
  return std::pair<int64_t, int64_t>{0, INT64_MAX};
}

/// The memref operands a tile op (or the fill of one) reads and writes.
void operandEffects(Operation *op, SmallVectorImpl<Value> &reads,
                    SmallVectorImpl<Value> &writes) {
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](GatherOp o) { writes.push_back(o.getTile()); })
      .Case([&](TileDotOp o) {
        reads.append({o.getLhs(), o.getTile()});
        writes.push_back(o.getResult());
      })
      .Case([&](SoftmaxOp o) {
        reads.append({o.getScores(), o.getLse()});
        writes.push_back(o.getProbs());
      })
      .Case([&](DScoresOp o) {
        reads.append({o.getProbs(), o.getDp(), o.getDelta()});
        writes.push_back(o.getDs());
      })
      .Case([&](DqAccumulateOp o) {
        reads.append({o.getDs(), o.getTile(), o.getAcc()});
        writes.push_back(o.getAcc());
      })
      .Case([&](DqPackedOp o) {
        reads.append({o.getPacked(), o.getTile(), o.getAcc()});
        writes.push_back(o.getAcc());
      })
      .Case([&](ScatterDkvOp o) {
        reads.append({o.getDs(), o.getProbs(), o.getQ(), o.getDout()});
      })
      .Case([&](PackDkvOp o) {
        reads.append({o.getDs(), o.getProbs()});
        writes.append({o.getPacked(), o.getSlots()});
      })
      .Case([&](ScatterPackedOp o) {
        reads.append({o.getPacked(), o.getSlots(), o.getQ(), o.getDout()});
      })
      .Case([&](DeltaOp o) { writes.push_back(o.getDelta()); })
      .Case([&](StoreDqOp o) { reads.push_back(o.getAcc()); })
      .Case([&](linalg::FillOp o) {
        for (Value out : o.getOutputs())
          writes.push_back(out);
      })
      // Other smla ops touch global memory only. Code that smla-gpu-map
      // emits itself (staging q/do rows) places its own barrier.
      .Default([](Operation *) {});
}

/// The ops of a fused epilogue run (kFusedEpilogueAttr) from its first
/// tile_dot `op`; empty if `op` does not start one.
SmallVector<Operation *> runFrom(Operation *op) {
  auto first = dyn_cast_or_null<TileDotOp>(op);
  auto second = first ? dyn_cast_or_null<TileDotOp>(op->getNextNode())
                      : TileDotOp();
  if (!second || !first->hasAttr(kFusedEpilogueAttr) ||
      !second->hasAttr(kFusedEpilogueAttr))
    return {};
  SmallVector<Operation *> run;
  for (Operation *o = op; o; o = o->getNextNode()) {
    if (!o->hasAttr(kFusedEpilogueAttr))
      continue;
    run.push_back(o);
    if (isa<PackDkvOp>(o))
      break;
  }
  return run;
}

/// The run that starts at `op`: at its first tile_dot, or at the first of
/// the chunks that run alongside it (kOverlapRunAttr; the chunks, then
/// the run, whose later chunk and tile_dot then start nothing); empty if
/// `op` starts none.
SmallVector<Operation *> fusedRun(Operation *op) {
  if (Operation *prev = op->getPrevNode();
      prev && prev->hasAttr(kOverlapRunAttr))
    return {};
  if (op->hasAttr(kOverlapRunAttr)) {
    SmallVector<Operation *> chunks{op};
    Operation *next = op->getNextNode();
    while (next && next->hasAttr(kOverlapRunAttr)) {
      chunks.push_back(next);
      next = next->getNextNode();
    }
    SmallVector<Operation *> run = runFrom(next);
    if (!run.empty())
      run.insert(run.begin(), chunks.begin(), chunks.end());
    return run;
  }
  return runFrom(op);
}

SmallVector<Access> accessesOf(Operation *op) {
  // Waiting for cp.async groups completes writes into shared memory that
  // other threads issued: a write of anything, as far as they can tell.
  if (isa<nvgpu::DeviceAsyncWaitOp>(op))
    return {Access{0, INT64_MAX, /*write=*/true, op, Value()}};
  SmallVector<Value> reads, writes;
  // A fused epilogue run is lowered at its first tile_dot, with S and dP
  // in registers: its accesses are all there, less those of the tiles.
  // A chunk that runs alongside it (kOverlapRunAttr) is part of it.
  SmallVector<Operation *> run;
  // A marked chunk after another belongs to the first one's run.
  if (op->hasAttr(kOverlapRunAttr)) {
    Operation *head = op;
    while (head->getPrevNode() &&
           head->getPrevNode()->hasAttr(kOverlapRunAttr))
      head = head->getPrevNode();
    if (head != op && !fusedRun(head).empty())
      return {};
  }
  if (op->hasAttr(kFusedEpilogueAttr) || op->hasAttr(kOverlapRunAttr))
    run = fusedRun(op);
  // (A marked chunk without its run keeps its own accesses: the lowering
  // refuses it, but its barriers stay right until then.)
  if (op->hasAttr(kFusedEpilogueAttr) && run.empty())
    return {};
  if (!run.empty()) {
    for (Operation *o : run)
      operandEffects(o, reads, writes);
    SmallVector<Value> tiles;
    for (Operation *o : run)
      if (auto dot = dyn_cast<TileDotOp>(o))
        tiles.push_back(dot.getResult());
    auto isTile = [&](Value v) { return llvm::is_contained(tiles, v); };
    llvm::erase_if(reads, isTile);
    llvm::erase_if(writes, isTile);
  } else {
    operandEffects(op, reads, writes);
  }
  SmallVector<Access> out;
  for (auto [values, write] : {std::pair{&reads, false}, {&writes, true}})
    for (Value v : *values)
      if (auto range = footprint(v))
        out.push_back({range->first, range->second, write, op, v});
  return out;
}

/// The lowering of softmax and dscores visits element (h, j) of its
/// [Hb, B] tiles in the same thread (flat index h * B + j over the CTA), so
/// a dependence between two of them through one tile of that shape never
/// crosses threads.
bool sameThread(const Access &first, const Access &second) {
  auto elementwise = [](Operation *op) {
    return isa<SoftmaxOp, DScoresOp>(op);
  };
  if (!elementwise(first.op) || !elementwise(second.op))
    return false;
  auto shape = [](Operation *op) {
    if (auto s = dyn_cast<SoftmaxOp>(op))
      return s.getScores().getType().getShape();
    return cast<DScoresOp>(op).getProbs().getType().getShape();
  };
  return first.buffer && second.buffer && first.begin == second.begin &&
         first.end == second.end &&
         first.buffer.getType() == second.buffer.getType() &&
         shape(first.op) == shape(second.op) &&
         cast<MemRefType>(first.buffer.getType()).getShape() ==
             shape(first.op);
}

bool conflicts(const Access &a, const Access &b) {
  return (a.write || b.write) && a.begin < b.end && b.begin < a.end &&
         !sameThread(a, b);
}

bool touchesSmem(Operation *op) {
  bool touches = false;
  op->walk([&](Operation *nested) {
    if (nested != op && !accessesOf(nested).empty())
      touches = true;
  });
  return touches;
}

/// Places barriers in `block`; `pending` holds the accesses since the last
/// barrier on every path into the block's first op.
void placeBarriers(Block &block, SmallVectorImpl<Access> &pending) {
  auto barrierBefore = [&](Operation *op) {
    OpBuilder b(op);
    gpu::BarrierOp::create(b, op->getLoc());
    pending.clear();
  };
  for (Operation &op : llvm::make_early_inc_range(block)) {
    if (isa<gpu::BarrierOp>(op)) {
      pending.clear();
      continue;
    }
    SmallVector<Access> accesses = accessesOf(&op);
    // linalg.fill has a region of its own but is a leaf here.
    if (accesses.empty() && op.getNumRegions()) {
      if (!touchesSmem(&op))
        continue;
      // Regions (loops, branches) are handled conservatively: no access is
      // pending on entry or after the op, and a body that ends with pending
      // accesses ends with a barrier (the next iteration, or whatever
      // follows, may conflict with them).
      if (!pending.empty())
        barrierBefore(&op);
      for (Region &region : op.getRegions())
        for (Block &inner : region) {
          SmallVector<Access> innerPending;
          placeBarriers(inner, innerPending);
          if (!innerPending.empty()) {
            OpBuilder b(inner.getTerminator());
            gpu::BarrierOp::create(b, op.getLoc());
          }
        }
      continue;
    }
    if (accesses.empty())
      continue;
    bool needed = llvm::any_of(accesses, [&](const Access &a) {
      return llvm::any_of(pending,
                          [&](const Access &p) { return conflicts(p, a); });
    });
    if (needed)
      barrierBefore(&op);
    // The copies of an issue_only gather land at its wait_only gather,
    // which writes the tile again; no barrier makes them visible earlier
    // (smla-prefetch-keys keeps the tile untouched in between).
    auto gather = dyn_cast<GatherOp>(op);
    if (!gather || !gather.getIssueOnly())
      pending.append(accesses.begin(), accesses.end());
  }
}
} // namespace

void mlir::smla::insertTileBarriers(gpu::GPUFuncOp func) {
  if (func->hasAttr(kBarriersPlacedAttr))
    return;
  SmallVector<Access> pending;
  placeBarriers(func.getBody().front(), pending);
  func->setAttr(kBarriersPlacedAttr, UnitAttr::get(func.getContext()));
}

namespace {
struct SMLAInsertBarriersPass
    : public mlir::smla::impl::SMLAInsertBarriersBase<SMLAInsertBarriersPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<gpu::GPUFuncOp>())
      insertTileBarriers(func);
  }
};
} // namespace
