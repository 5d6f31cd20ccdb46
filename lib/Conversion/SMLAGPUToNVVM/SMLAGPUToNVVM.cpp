//===- SMLAGPUToNVVM.cpp - the smla-gpu-to-nvvm pass ----------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// Three rounds per gpu.func that holds a warp_specialize:
//   1. in each role, the cloned smla tile ops (index loads, masks, live
//      rows, delta) become the lane functions and CTA-cooperative code of
//      smla-lower-to-nvvm, run by that role's 128 threads; gather_keys and
//      write_slots read those lanes;
//   2. the patterns of every other smla_gpu op but the pipelines and roles;
//   3. the pipelines' initialisation and the roles (once nothing reads a
//      pipeline any more).
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"
#include "smla/Conversion/SMLAGPUToNVVM/SMLAGPUToNVVM.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLAGPUTONVVM
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;
namespace sg = mlir::smla_gpu;

namespace {
/// Round 1 for one role: its smla ops and the smla_gpu ops that read
/// their lanes.
LogicalResult lowerRoleTileOps(Block &role) {
  SmallVector<Operation *> ops;
  role.walk([&](Operation *op) {
    if (isa<SMLADialect>(op->getDialect()) ||
        isa<sg::GatherKeysOp, sg::WriteSlotsOp>(op))
      ops.push_back(op);
  });
  if (ops.empty())
    return success();
  OpBuilder tb = OpBuilder::atBlockBegin(&role);
  Value tid = sg::ThreadInWarpgroupOp::create(tb, role.getParentOp()->getLoc(),
                                              tb.getIndexType());
  LaneMap lanes;
  for (Operation *op : ops) {
    OpBuilder b(op);
    CtaEmitter e(b, op->getLoc(), tid, sg::kWarpgroupThreads);
    LogicalResult r =
        llvm::TypeSwitch<Operation *, LogicalResult>(op)
            .Case([&](IndexLoadOp o) {
              lowerIndexLoadLanes(o, lanes);
              return success();
            })
            .Case([&](IndexMaskOp o) {
              lowerIndexMaskLanes(e, o, lanes);
              return success();
            })
            .Case([&](RowLiveOp o) {
              lowerRowLiveLanes(e, o, lanes);
              return success();
            })
            .Case([&](DeltaOp o) { return lowerDelta(e, o); })
            .Case([&](sg::GatherKeysOp o) -> LogicalResult {
              if (!lanes.count(o.getMask()) || !lanes.count(o.getIndices()))
                return o.emitOpError() << "reads lanes of no index or mask "
                                          "op of its role";
              return lowerGatherKeys(e, o, lanes.lookup(o.getMask()),
                                     lanes.lookup(o.getIndices()));
            })
            .Case([&](sg::WriteSlotsOp o) {
              return lowerWriteSlots(e, o, lanes);
            })
            .Default([](Operation *o) {
              return o->emitOpError()
                     << "has no lowering inside a warp-specialized role";
            });
    if (failed(r))
      return failure();
  }
  // The lane vectors have no users left but each other.
  for (Operation *op : llvm::reverse(ops)) {
    for (Value v : op->getResults())
      if (!v.use_empty())
        return op->emitOpError() << "still has uses after lowering";
    op->erase();
  }
  return success();
}

/// A kernel that counts its non-finite output rows: every store_rows flags
/// what it stores in one per-thread flag, which count_nonfinite_rows reads
/// after the roles.
LogicalResult lowerNonFiniteCounts(gpu::GPUFuncOp func) {
  SmallVector<sg::CountNonFiniteRowsOp> counts;
  func.walk([&](sg::CountNonFiniteRowsOp op) { counts.push_back(op); });
  if (counts.empty())
    return success();
  if (counts.size() != 1)
    return counts[1].emitOpError() << "is the kernel's second row count";
  OpBuilder entry = OpBuilder::atBlockBegin(&func.getBody().front());
  NonFiniteFlag flag(entry, func.getLoc(), counts.front());
  SmallVector<sg::StoreRowsOp> stores;
  func.walk([&](sg::StoreRowsOp op) { stores.push_back(op); });
  for (sg::StoreRowsOp op : stores) {
    OpBuilder b(op);
    lowerStoreRows(b, op, &flag);
    op->erase();
  }
  sg::CountNonFiniteRowsOp op = counts.front();
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto block = func.getKnownBlockSize();
  int64_t threads = block ? (*block)[0] : 1;
  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  CtaEmitter e(b, loc, tid, threads);
  Value dest = op.getDest(), t = op.getToken(), row0 = op.getRow0();
  int64_t width = op.getDest().getType().getDimSize(2);
  emitNonFiniteRowCount(
      e, op.getCounters(), flag.get(b, loc), sg::kFragmentRows, width,
      [&](OpBuilder &lb, Location l, Value row, Value col) -> Value {
        Value r = arith::AddIOp::create(lb, l, row0, row);
        return memref::LoadOp::create(lb, l, dest, ValueRange{t, r, col});
      });
  op->erase();
  return success();
}

struct SMLAGPUToNVVMPass
    : public mlir::smla::impl::SMLAGPUToNVVMBase<SMLAGPUToNVVMPass> {
  void runOnOperation() override {
    SmallVector<sg::WarpSpecializeOp> roles;
    getOperation().walk([&](sg::WarpSpecializeOp op) { roles.push_back(op); });
    for (sg::WarpSpecializeOp ws : roles)
      for (Region &r : ws.getPartitions())
        if (failed(lowerRoleTileOps(r.front())))
          return signalPassFailure();
    SmallVector<gpu::GPUFuncOp> funcs;
    getOperation().walk([&](gpu::GPUFuncOp f) { funcs.push_back(f); });
    for (gpu::GPUFuncOp f : funcs)
      if (failed(lowerNonFiniteCounts(f)))
        return signalPassFailure();
    MLIRContext *ctx = &getContext();
    GreedyRewriteConfig config;
    config.enableFolding(false);
    {
      RewritePatternSet patterns(ctx);
      populateCopyPatterns(patterns);
      populateWgmmaPatterns(patterns);
      populateFragmentPatterns(patterns);
      populatePipelineUsePatterns(patterns);
      if (failed(applyPatternsGreedily(getOperation(), std::move(patterns),
                                       config)))
        return signalPassFailure();
    }
    {
      RewritePatternSet patterns(ctx);
      populateRolePatterns(patterns);
      if (failed(applyPatternsGreedily(getOperation(), std::move(patterns),
                                       config)))
        return signalPassFailure();
    }
    WalkResult left = getOperation().walk([](Operation *op) {
      if (isa<sg::SMLAGPUDialect>(op->getDialect())) {
        op->emitOpError() << "was not lowered";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (left.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
