//===- Step.cpp - finding the step the schedule restates -----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// The warp-specialized schedule takes a bwd kernel whose step is one of
// each guarded tile op in one block loop, at 64 heads and 64 keys per
// block (whyNotWarpSpecialized says which condition fails).
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToSMLAGPU/Step.h"
#include "smla/Conversion/SMLAToSMLAGPU/SMLAToSMLAGPU.h"

using namespace mlir;
using namespace mlir::smla;
namespace sg = mlir::smla_gpu;

namespace {
template <typename OpT>
FailureOr<OpT> single(Operation *root, std::string &why, StringRef what) {
  OpT found;
  int count = 0;
  root->walk([&](OpT op) {
    found = op;
    ++count;
  });
  if (count != 1) {
    why = ("expected one " + what + ", found " + Twine(count)).str();
    return failure();
  }
  return found;
}

} // namespace

FailureOr<WarpSpecializedStep>
mlir::smla::findWarpSpecializedStep(gpu::GPUFuncOp func, std::string &why) {
  WarpSpecializedStep s;
  auto get = [&](auto &field, StringRef what) {
    using OpT = std::decay_t<decltype(field)>;
    FailureOr<OpT> op = single<OpT>(func, why, what);
    if (failed(op))
      return false;
    field = *op;
    return true;
  };
  if (!get(s.delta, "smla.delta") || !get(s.live, "smla.row_live") ||
      !get(s.gather, "smla.gather") || !get(s.softmax, "smla.softmax") ||
      !get(s.dscores, "smla.dscores") || !get(s.dq, "smla.dq_accumulate") ||
      !get(s.scatter, "smla.scatter_dkv") || !get(s.store, "smla.store_dq"))
    return failure();
  SmallVector<TileDotOp> dots;
  func.walk([&](TileDotOp op) { dots.push_back(op); });
  if (dots.size() != 2) {
    why = "expected two smla.tile_dot (scores and dP)";
    return failure();
  }
  s.scores = dots[0].getResult() == s.softmax.getScores() ? dots[0] : dots[1];
  s.dp = s.scores == dots[0] ? dots[1] : dots[0];
  s.loop = s.gather->getParentOfType<scf::ForOp>();
  if (!s.loop || s.softmax->getParentOp() != s.loop ||
      s.scatter->getParentOp() != s.loop || s.dq->getParentOp() != s.loop) {
    why = "expected the step's tile ops in one top-k block loop";
    return failure();
  }
  func.walk([&](linalg::FillOp f) { s.fills.push_back(f); });
  return s;
}

std::string mlir::smla::whyNotWarpSpecialized(gpu::GPUFuncOp func) {
  std::string why;
  FailureOr<WarpSpecializedStep> s = findWarpSpecializedStep(func, why);
  if (failed(s))
    return why;
  int64_t rows = dimOf(s->softmax.getScores(), 0);
  int64_t keys = dimOf(s->softmax.getScores(), 1);
  int64_t w = dimOf(s->gather.getKv(), 2);
  int64_t d = dimOf(s->dp.getLhs(), 2);
  if (rows != kWsRows || keys != kWsKeys)
    return "needs 64 heads per CTA and blocks of 64 keys, got " +
           std::to_string(rows) + " and " + std::to_string(keys);
  if (w % 64 || d % 64 || d > w || w - kWsSoftmaxDqColumns > 2 * 256 ||
      w <= kWsSoftmaxDqColumns)
    return "needs q/k and v widths that are multiples of 64 with the v "
           "width at most the q/k width, and a q/k width in (256, 768]";
  if (s->softmax.getPairMask())
    return "takes one token per CTA (no token pairs)";
  if (!s->softmax.isGuarded() || !s->gather.getMask() ||
      !s->scatter.getMask())
    return "needs the guarded tile ops (smla-guarded)";
  if (auto block = func.getKnownBlockSize())
    if ((*block)[0] != 3 * sg::kWarpgroupThreads)
      return "needs 384 threads (three warpgroups), got " +
             std::to_string((*block)[0]);
  return "";
}

