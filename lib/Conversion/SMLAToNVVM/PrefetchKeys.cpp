//===- PrefetchKeys.cpp - gather the next key tile during the scatter -----===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// A step of the top-k block loop gathers its key rows (cp.async), waits for
// them, and runs the block products, softmax, dS, the dQ accumulate and the
// dKV scatter. Nothing else runs on the SM while the copies are in flight
// (one CTA per SM for the 32-head kernels), so their latency is paid once
// per block. The scatter does not read the key tile: once the dQ
// accumulate of step j is done, the copies for step j + 1 can be issued
// and land while step j's reductions run. Passes.td has the IR.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLAPREFETCHKEYS
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
/// The ops of the loop body that the gather's operands are computed from,
/// in body order: side-effect-free ops and the index load and mask (whose
/// only effect, counting, the clones drop). Fails on anything else, and on
/// a dependence on a loop-carried value other than the induction variable.
FailureOr<SmallVector<Operation *>> addressSlice(scf::ForOp loop,
                                                 GatherOp gather) {
  Block *body = loop.getBody();
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> work(gather->getOperands());
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner() == body && arg != loop.getInductionVar())
        return failure();
      continue;
    }
    Operation *def = v.getDefiningOp();
    if (def->getBlock() != body || !slice.insert(def))
      continue;
    if (def->getNumRegions() ||
        !(isMemoryEffectFree(def) || isa<IndexLoadOp, IndexMaskOp>(def)))
      return failure();
    work.append(def->operand_begin(), def->operand_end());
  }
  SmallVector<Operation *> ops(slice.begin(), slice.end());
  llvm::sort(ops, [](Operation *a, Operation *b) {
    return a->isBeforeInBlock(b);
  });
  return ops;
}

/// At `b`: if `cond`, the slice at step `step` and an issue_only gather of
/// its indices and mask into the same tile.
void emitIssue(OpBuilder &b, scf::ForOp loop, GatherOp gather,
               ArrayRef<Operation *> slice, Value step, Value cond) {
  Location loc = gather.getLoc();
  scf::IfOp::create(b, loc, cond, [&](OpBuilder &tb, Location l) {
    IRMapping map;
    map.map(loop.getInductionVar(), step);
    auto get = [&](Value v) { return v ? map.lookupOrDefault(v) : v; };
    for (Operation *op : slice) {
      // The block's own index load and mask count its invalid slots; the
      // copies' clones count nothing.
      if (auto load = dyn_cast<IndexLoadOp>(op)) {
        auto c = IndexLoadOp::create(
            tb, load.getLoc(), load.getType(), get(load.getIndices()),
            get(load.getToken()), get(load.getGroup()), get(load.getOffset()),
            get(load.getLimit()), get(load.getLength()),
            /*counters=*/Value());
        map.map(load.getResult(), c.getResult());
      } else if (auto mask = dyn_cast<IndexMaskOp>(op)) {
        auto c = IndexMaskOp::create(
            tb, mask.getLoc(), mask.getType(), get(mask.getIndices()),
            get(mask.getBound()), get(mask.getLanes()), get(mask.getLimit()),
            /*counters=*/Value());
        map.map(mask.getResult(), c.getResult());
      } else {
        tb.clone(*op, map);
      }
    }
    auto issue = GatherOp::create(tb, loc, get(gather.getKv()),
                                  get(gather.getGroup()),
                                  get(gather.getIndices()),
                                  get(gather.getMask()), gather.getTile());
    issue.setIssueOnly(true);
    scf::YieldOp::create(tb, l);
  });
}

/// Splits the one gather of `loop`'s body. A loop stays as it is when it
/// has not exactly one whole gather, when nothing reads the key tile after
/// it, when something touches the tile before it, or when its indices or
/// mask come from ops that cannot be re-run for another step.
void prefetch(scf::ForOp loop) {
  Block *body = loop.getBody();
  SmallVector<GatherOp> gathers;
  for (auto g : body->getOps<GatherOp>())
    gathers.push_back(g);
  if (gathers.size() != 1 || gathers[0].getIssueOnly() ||
      gathers[0].getWaitOnly())
    return;
  GatherOp gather = gathers[0];
  // A step of two tokens (smla.index_pair) re-runs both tokens' index
  // loads and masks per issue: ptxas spilled 8 bytes in the 32-row pair
  // kernel, so it keeps the whole gather.
  if (gather.getIndices().getDefiningOp<IndexPairOp>())
    return;
  // Every view of the tile's buffer counts, not only the gather's.
  Value tile = gather.getTile();
  if (memref::AllocaOp root = rootAlloca(tile))
    tile = root.getResult();
  // The last op of the step that touches the tile: the copies of the next
  // step start after it. Every other touch must follow the gather.
  Operation *last = nullptr;
  SmallVector<Operation *> users;
  collectUses(tile, users);
  for (Operation *user : users) {
    Operation *top = body->findAncestorOpInBlock(*user);
    if (!top || top == gather.getOperation())
      continue;
    if (top->isBeforeInBlock(gather))
      return;
    if (!last || last->isBeforeInBlock(top))
      last = top;
  }
  if (!last)
    return;
  FailureOr<SmallVector<Operation *>> slice = addressSlice(loop, gather);
  if (failed(slice))
    return;
  // Step 0 issues its own copies first thing (issued before the loop
  // instead, they left ptxas one register short: an 8-byte spill in the
  // 32-head kernel). Step j issues step j + 1's after its last use of the
  // tile, right before the next op with effects (the clones of the pure
  // ops in between, the scatter's mask, need not stay live across it).
  Location loc = loop.getLoc();
  Value iv = loop.getInductionVar();
  OpBuilder b(gather);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, iv,
                                      loop.getLowerBound());
  emitIssue(b, loop, gather, *slice, loop.getLowerBound(), first);
  Operation *at = last->getNextNode();
  while (at != body->getTerminator() && isMemoryEffectFree(at) &&
         !at->getNumRegions())
    at = at->getNextNode();
  b.setInsertionPoint(at);
  Value next = arith::AddIOp::create(b, loc, iv, loop.getStep());
  Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, next,
                                       loop.getUpperBound());
  emitIssue(b, loop, gather, *slice, next, inside);
  gather.setWaitOnly(true);
}

struct SMLAPrefetchKeysPass
    : public mlir::smla::impl::SMLAPrefetchKeysBase<SMLAPrefetchKeysPass> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation()->walk([&](scf::ForOp loop) {
      auto func = loop->getParentOfType<gpu::GPUFuncOp>();
      if (!func)
        return;
      // With several CTAs per SM the others run while one waits for its
      // keys: the per-token H=16 kernel (2 CTAs per SM) gained nothing on
      // B2 (15.37 against 15.39 ms, `SMLA_PAIRS=off bench/bench_bwd.py
      // --shapes B2`) and would spill.
      auto ctas = func->getAttrOfType<IntegerAttr>(kCtasPerSmAttr);
      if (ctas && ctas.getInt() > 1)
        return;
      loops.push_back(loop);
    });
    for (scf::ForOp loop : loops)
      prefetch(loop);
  }
};
} // namespace
