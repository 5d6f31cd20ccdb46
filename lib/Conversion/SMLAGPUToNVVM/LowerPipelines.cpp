//===- LowerPipelines.cpp - roles and pipelines to NVVM -------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// A pipeline of S stages keeps 2 S mbarriers in its i64 words: full[s] at
// s, empty[s] at S + s. Use u of the ring is stage u % S in phase
// (u / S) % 2. Consumers wait on full with that parity; the producer
// waits on empty with the other parity, which a freshly initialised
// mbarrier already satisfies (the first use of each stage does not wait).
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAGPUToNVVM/SMLAGPUToNVVM.h"
#include "smla/Conversion/SMLAToNVVM/MmaBuilder.h"
#include "smla/Conversion/SMLAToNVVM/Wgmma.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;
namespace sg = mlir::smla_gpu;

namespace {
sg::PipelineCreateOp creator(Value pipeline) {
  return pipeline.getDefiningOp<sg::PipelineCreateOp>();
}

/// The shared pointer of mbarrier `index` (full: 0 .. S - 1, empty: S ..).
Value barrierPtr(Mma &m, sg::PipelineCreateOp create, Value index) {
  Value base = m.base(create.getBarriers());
  return m.ptr(m.add(base, m.mul(index, 8)), 3);
}

struct Use {
  Value stage, parity; // index, i32
};
Use useOf(Mma &m, sg::PipelineType type, Value use) {
  int64_t s = type.getStages();
  Value phase = m.rem(m.div(use, s), 2);
  return {m.rem(use, s), arith::IndexCastOp::create(m.b, m.loc,
                                                    m.b.getI32Type(), phase)};
}

/// A spin on mbarrier.try_wait.parity (which itself waits a while in
/// hardware) with no suspend-time hint: with one, the waiting warps sleep
/// (NANOSLEEP.SYNCS) past the phase's completion.
void waitParity(Mma &m, Value ptr, Value parity) {
  wgmma::inlineAsm(m.b, m.loc, Type(), ValueRange{ptr, parity},
                   "{\n.reg .pred p;\nLAB_WAIT:\n"
                   "mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n"
                   "@!p bra LAB_WAIT;\n}",
                   "l,r");
}

void arrive(Mma &m, Value ptr) {
  NVVM::MBarrierArriveOp::create(m.b, m.loc, Type(), ptr, Value());
}

/// One use of a pipeline (`use` on `create`'s mbarriers): what each op
/// emits.
using UseBody = void (*)(Mma &, sg::PipelineCreateOp, sg::PipelineType, Use);

/// The empty barrier with the other parity (a fresh stage passes).
void acquire(Mma &m, sg::PipelineCreateOp c, sg::PipelineType t, Use u) {
  Value empty = barrierPtr(m, c, m.add(u.stage, t.getStages()));
  waitParity(m, empty, arith::XOrIOp::create(m.b, m.loc, u.parity,
                                             i32c(m.b, m.loc, 1)));
}

/// This thread's cp.async copies arrive when they land; its ordinary
/// shared stores reach the async proxy (wgmma) through the fence.
void commit(Mma &m, sg::PipelineCreateOp c, sg::PipelineType, Use u) {
  Value full = barrierPtr(m, c, u.stage);
  if (c.getAsyncCopies())
    NVVM::CpAsyncMBarrierArriveOp::create(m.b, m.loc, full, /*noinc=*/true);
  emitProxyFence(m.b, m.loc);
  arrive(m, full);
}

void wait(Mma &m, sg::PipelineCreateOp c, sg::PipelineType, Use u) {
  waitParity(m, barrierPtr(m, c, u.stage), u.parity);
  emitProxyFence(m.b, m.loc);
}

void release(Mma &m, sg::PipelineCreateOp c, sg::PipelineType t, Use u) {
  arrive(m, barrierPtr(m, c, m.add(u.stage, t.getStages())));
}

template <typename OpT, UseBody Body>
struct LowerUse : OpRewritePattern<OpT> {
  using OpRewritePattern<OpT>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpT op, PatternRewriter &rw) const override {
    sg::PipelineCreateOp create = creator(op.getPipeline());
    if (!create)
      return rw.notifyMatchFailure(op, "the pipeline is not a pipeline_create");
    Mma m{rw, op.getLoc()};
    auto type = cast<sg::PipelineType>(op.getPipeline().getType());
    Body(m, create, type, useOf(m, type, op.getUse()));
    rw.eraseOp(op);
    return success();
  }
};

/// Thread 0 initialises the mbarriers; the CTA barrier after it orders the
/// initialisation before every role's first use.
struct LowerPipelineCreate : OpRewritePattern<sg::PipelineCreateOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::PipelineCreateOp op,
                                PatternRewriter &rw) const override {
    if (!op.getPipeline().use_empty())
      return rw.notifyMatchFailure(op, "a use of the pipeline is not lowered");
    Location loc = op.getLoc();
    Mma m{rw, loc};
    auto type = cast<sg::PipelineType>(op.getPipeline().getType());
    Value tid = gpu::ThreadIdOp::create(rw, loc, gpu::Dimension::x);
    int64_t full = type.getProducers() * (op.getAsyncCopies() ? 2 : 1);
    scf::IfOp::create(rw, loc, m.lt(tid, 1), [&](OpBuilder &b, Location l) {
      Mma im{b, l};
      for (int64_t s = 0; s < type.getStages(); ++s) {
        NVVM::MBarrierInitOp::create(b, l, barrierPtr(im, op, im.c(s)),
                                     i32c(b, l, full), Value());
        NVVM::MBarrierInitOp::create(
            b, l, barrierPtr(im, op, im.c(type.getStages() + s)),
            i32c(b, l, type.getConsumers()), Value());
      }
      scf::YieldOp::create(b, l);
    });
    gpu::BarrierOp::create(rw, loc);
    rw.eraseOp(op);
    return success();
  }
};

/// One branch per warpgroup; the branch condition comes from lane 0 of the
/// warp (gpu.shuffle idx), so that ptxas sees it is warp-uniform and
/// every warpgroup's setmaxnreg is one branch of a single if / else.
struct LowerWarpSpecialize : OpRewritePattern<sg::WarpSpecializeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::WarpSpecializeOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Mma m{rw, loc};
    int64_t roles = op.getPartitions().size();
    int64_t threads = roles * sg::kWarpgroupThreads;
    // The registers every thread starts with: the SM's share of this CTA,
    // rounded down to the allocation granularity.
    int64_t start = (sg::kRegistersPerSm / threads) / 8 * 8;
    Value tid = gpu::ThreadIdOp::create(rw, loc, gpu::Dimension::x);
    Value wg = arith::IndexCastOp::create(
        rw, loc, rw.getI32Type(), m.div(tid, sg::kWarpgroupThreads));
    Value uniform = gpu::ShuffleOp::create(rw, loc, wg, i32c(rw, loc, 0),
                                           i32c(rw, loc, 32),
                                           gpu::ShuffleMode::IDX)
                        .getShuffleResult();
    ArrayRef<int32_t> registers = op.getRegisters();
    std::function<void(OpBuilder &, int64_t)> branch =
        [&](OpBuilder &b, int64_t role) {
          auto body = [&](OpBuilder &nb, Location l, int64_t r) {
            if (registers[r] != start)
              NVVM::SetMaxRegisterOp::create(
                  nb, l, registers[r],
                  registers[r] < start ? NVVM::SetMaxRegisterAction::decrease
                                       : NVVM::SetMaxRegisterAction::increase);
            auto yield = scf::YieldOp::create(nb, l);
            rw.inlineBlockBefore(&op.getPartitions()[r].front(), yield);
            // Back to the starting budget: the code after the roles runs
            // on every warp with the registers ptxas planned for the entry.
            if (registers[r] != start) {
              OpBuilder end(yield);
              NVVM::SetMaxRegisterOp::create(
                  end, l, start,
                  registers[r] < start ? NVVM::SetMaxRegisterAction::increase
                                       : NVVM::SetMaxRegisterAction::decrease);
            }
          };
          if (role == roles - 1) {
            body(b, loc, role);
            return;
          }
          Value is = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                           uniform, i32c(b, loc, role));
          scf::IfOp::create(
              b, loc, is,
              [&](OpBuilder &nb, Location l) { body(nb, l, role); },
              [&](OpBuilder &nb, Location l) {
                branch(nb, role + 1);
                if (role + 1 != roles - 1)
                  scf::YieldOp::create(nb, l);
              });
        };
    branch(rw, 0);
    rw.eraseOp(op);
    return success();
  }
};

struct LowerThreadInWarpgroup : OpRewritePattern<sg::ThreadInWarpgroupOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(sg::ThreadInWarpgroupOp op,
                                PatternRewriter &rw) const override {
    Mma m{rw, op.getLoc()};
    rw.replaceOp(op, m.rem(gpu::ThreadIdOp::create(rw, op.getLoc(),
                                                   gpu::Dimension::x),
                           sg::kWarpgroupThreads));
    return success();
  }
};
} // namespace

void mlir::smla::populatePipelineUsePatterns(RewritePatternSet &patterns) {
  patterns.add<LowerUse<sg::ProducerAcquireOp, acquire>,
               LowerUse<sg::ProducerCommitOp, commit>,
               LowerUse<sg::ConsumerWaitOp, wait>,
               LowerUse<sg::ConsumerReleaseOp, release>>(patterns.getContext());
}

void mlir::smla::populateRolePatterns(RewritePatternSet &patterns) {
  patterns.add<LowerPipelineCreate, LowerWarpSpecialize,
               LowerThreadInWarpgroup>(patterns.getContext());
}
