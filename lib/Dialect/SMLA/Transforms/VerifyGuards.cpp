//===- VerifyGuards.cpp - refuse unguarded memory accesses and exps -------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLA/Transforms/GuardAnalysis.h"
#include "smla/Dialect/SMLA/Transforms/Passes.h"
#include "smla/Dialect/SMLAGPU/IR/SMLAGPU.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLAVERIFYGUARDS
#include "smla/Dialect/SMLA/Transforms/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
LogicalResult verifyAccess(Operation *op, StringRef what, Value mask,
                           Value indices, Value tensor, Value token,
                           Value group) {
  std::string why = explainMaskMismatch(mask, indices, tensor);
  if (why.empty())
    why = explainIndexOrigin(indices, token, group);
  if (why.empty())
    return success();
  return op->emitOpError() << "is an unguarded " << what << ": " << why;
}

LogicalResult verifySoftmax(SoftmaxOp op) {
  if (!op.getClamp())
    return op.emitOpError() << "is an unguarded exponential: has no clamp";
  std::string why = explainLiveMismatch(op.getLive(), op);
  if (!why.empty())
    return op.emitOpError() << "is an unguarded exponential: " << why;
  if (!op.getMask())
    return op.emitOpError() << "is an unguarded exponential: has no index mask";
  GatherOp gather = findScoreGather(op);
  auto pair = gather && gather.getMask()
                  ? gather.getMask().getDefiningOp<IndexPairOp>()
                  : IndexPairOp();
  bool matches = pair ? op.getMask() == pair.getFirstMask() &&
                            op.getPairMask() == pair.getSecondKeeps()
                      : gather && gather.getMask() == op.getMask() &&
                            !op.getPairMask();
  if (!matches)
    return op.emitOpError() << "is an unguarded exponential: its mask is not "
                               "the mask of the keys its scores come from";
  // The keys must be its own token's (both tokens' for a pair).
  why = explainIndexOrigin(gather.getIndices(), op.getToken(),
                           gather.getGroup());
  if (!why.empty())
    return op.emitOpError() << "is an unguarded exponential: " << why;
  return success();
}

/// The value of a scalar float constant or of a vector splat of one.
std::optional<APFloat> constantFloat(Value v) {
  FloatAttr attr;
  if (matchPattern(v, m_Constant(&attr)))
    return attr.getValue();
  DenseElementsAttr dense;
  if (matchPattern(v, m_Constant(&dense)) && dense.isSplat() &&
      isa<FloatType>(dense.getElementType()))
    return dense.getSplatValue<APFloat>();
  return std::nullopt;
}

/// A lowered exponential must read a clamped exponent and be consumed only
/// as the chosen value of a select: the guard that makes P exactly 0.
LogicalResult verifyLoweredExp(Operation *exp) {
  Operation *clamp = exp->getOperand(0).getDefiningOp();
  bool clamped = false;
  if (clamp && isa<arith::MinimumFOp, arith::MinNumFOp>(clamp)) {
    for (Value bound : clamp->getOperands())
      if (std::optional<APFloat> c = constantFloat(bound))
        clamped |= c->convertToDouble() <= kMaxExp2Clamp;
  }
  if (!clamped)
    return exp->emitOpError()
           << "is an unguarded exponential: its exponent is not clamped by "
              "a constant <= "
           << static_cast<int64_t>(kMaxExp2Clamp);
  for (OpOperand &use : exp->getResult(0).getUses()) {
    auto select = dyn_cast<arith::SelectOp>(use.getOwner());
    if (!select || use.getOperandNumber() != 1)
      return exp->emitOpError() << "is an unguarded exponential: its result "
                                   "is used outside the true branch of an "
                                   "arith.select";
    // The guard selects exactly zero for dead rows and invalid lanes.
    std::optional<APFloat> otherwise = constantFloat(select.getFalseValue());
    if (!otherwise || !otherwise->isZero())
      return exp->emitOpError() << "is an unguarded exponential: the select "
                                   "that consumes it does not choose 0.0 "
                                   "otherwise";
  }
  return success();
}

bool isStaged(Value rows) {
  auto type = cast<MemRefType>(rows.getType());
  return type.getMemorySpace() != nullptr;
}

/// A deferred scatter (smla-defer-scatter) reads its slots from a buffer:
/// every op that writes that buffer must be a pack_dkv whose mask guards
/// its indices for this dkv and group, or a fill with -1 (no slot).
LogicalResult verifyScatterPacked(ScatterPackedOp op) {
  Value slots = op.getSlots();
  bool packed = false;
  for (Operation *user : slots.getUsers()) {
    if (isa<ScatterPackedOp>(user))
      continue;
    if (auto pack = dyn_cast<PackDkvOp>(user)) {
      // (slots is i32: it can only be the pack's slots operand.)
      packed = true;
      // Its q and do are the CTA's staged rows (read at token 0), so the
      // indices' token is not compared; their group is.
      if (failed(verifyAccess(op, "scatter", pack.getMask(),
                              pack.getIndices(), op.getDkv(), Value(),
                              op.getGroup())))
        return failure();
      continue;
    }
    if (auto fill = dyn_cast<linalg::FillOp>(user)) {
      IntegerAttr value;
      if (matchPattern(fill.getInputs()[0], m_Constant(&value)) &&
          value.getValue().isAllOnes())
        continue;
    }
    return op.emitOpError() << "is an unguarded scatter: its slots are "
                               "written by '"
                            << user->getName()
                            << "', not by a pack_dkv or a fill with -1";
  }
  if (!packed)
    return op.emitOpError() << "is an unguarded scatter: no pack_dkv writes "
                               "its slots";
  return success();
}

/// The slots a warp-specialized dKV reduction addresses come from
/// smla_gpu.fragment_rows of a stage's slots buffer, and every writer of
/// that buffer is a write_slots one of whose masks guards `dkv` for the
/// reduction's group.
LogicalResult verifyReduceDkv(smla_gpu::ReduceDkvOp op) {
  auto rows = op.getSlots().getDefiningOp<smla_gpu::FragmentRowsOp>();
  if (!rows)
    return op.emitOpError() << "is an unguarded scatter: its slots are not "
                               "the rows of a slots buffer";
  bool written = false;
  for (Operation *user : rows.getValues().getUsers()) {
    if (isa<smla_gpu::FragmentRowsOp, smla_gpu::FragmentColumnsOp>(user))
      continue;
    auto slots = dyn_cast<smla_gpu::WriteSlotsOp>(user);
    if (!slots)
      return op.emitOpError() << "is an unguarded scatter: its slots are "
                                 "written by '"
                              << user->getName()
                              << "', not by smla_gpu.write_slots";
    written = true;
    std::string why = "no mask of its write_slots guards the dkv it adds to";
    for (Value mask : slots.getMasks()) {
      std::string w =
          explainMaskMismatch(mask, slots.getIndices(), op.getDkv());
      if (w.empty())
        w = explainIndexOrigin(slots.getIndices(), Value(), op.getGroup());
      if (w.empty()) {
        why.clear();
        break;
      }
    }
    if (!why.empty())
      return op.emitOpError() << "is an unguarded scatter: " << why;
  }
  if (!written)
    return op.emitOpError() << "is an unguarded scatter: no write_slots "
                               "writes its slots";
  return success();
}

struct SMLAVerifyGuardsPass
    : public mlir::smla::impl::SMLAVerifyGuardsBase<SMLAVerifyGuardsPass> {
  void runOnOperation() override {
    bool ok = true;
    getOperation()->walk([&](Operation *op) {
      LogicalResult result = success();
      if (isa<SparseAttentionBwdOp>(op))
        result = op->emitOpError()
                 << "has no guards; decompose it and insert guards "
                    "(smla-guarded pipeline) first";
      else if (auto gather = dyn_cast<GatherOp>(op))
        result =
            verifyAccess(op, "gather", gather.getMask(), gather.getIndices(),
                         gather.getKv(), Value(), gather.getGroup());
      else if (auto scatter = dyn_cast<ScatterDkvOp>(op))
        // q staged in shared memory (smla-gpu-map) is read at token 0:
        // then only the group is compared.
        result = verifyAccess(op, "scatter", scatter.getMask(),
                              scatter.getIndices(), scatter.getDkv(),
                              isStaged(scatter.getQ()) ? Value()
                                                       : scatter.getToken(),
                              scatter.getGroup());
      else if (auto keys = dyn_cast<smla_gpu::GatherKeysOp>(op))
        result = verifyAccess(op, "gather", keys.getMask(), keys.getIndices(),
                              keys.getKv(), Value(), keys.getGroup());
      else if (auto reduce = dyn_cast<smla_gpu::ReduceDkvOp>(op))
        result = verifyReduceDkv(reduce);
      else if (auto chunk = dyn_cast<ScatterPackedOp>(op))
        result = verifyScatterPacked(chunk);
      else if (auto softmax = dyn_cast<SoftmaxOp>(op))
        result = verifySoftmax(softmax);
      else if (isa<math::Exp2Op, math::ExpOp>(op))
        result = verifyLoweredExp(op);
      ok &= succeeded(result);
    });
    if (!ok)
      signalPassFailure();
  }
};
} // namespace
