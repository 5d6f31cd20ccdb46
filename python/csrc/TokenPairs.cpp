//===- TokenPairs.cpp - Key sharing between neighbouring tokens ----------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "TokenPairs.h"
#include "SlotWalk.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace smla::ext {
namespace {

/// A shape whose union was too long is measured again every kProbeEvery
/// calls (the indices, not the shape, decide: B2 and B2r share theirs).
constexpr int64_t kProbeEvery = 8;

struct PairsHistory {
  int64_t calls = 0;
  bool lastUsed = true;
};

/// Whether this call should build the union at all (auto mode).
bool shouldProbe(const BwdArgs &args, const BwdSizes &n,
                 PairsHistory *&history) {
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t>;
  static std::mutex mutex;
  // Leaked on purpose: nothing to free from a static destructor.
  static auto &histories = *new std::map<Key, PairsHistory>();
  std::lock_guard<std::mutex> lock(mutex);
  if (histories.size() > 64)
    histories.clear();
  history = &histories[Key{int(args.q.get_device()), n.T, n.S_kv, n.K, n.H}];
  return history->lastUsed || history->calls % kProbeEvery == 0;
}

} // namespace

PairsMode readPairsMode() {
  const char *value = std::getenv("SMLA_PAIRS");
  std::string mode = value != nullptr ? value : "";
  TORCH_CHECK(mode.empty() || mode == "auto" || mode == "on" || mode == "off",
              kOpName,
              ": environment variable SMLA_PAIRS must be auto, on or off, "
              "got '",
              mode, "'");
  return mode == "on" ? PairsMode::On
         : mode == "off" ? PairsMode::Off
                         : PairsMode::Auto;
}

at::Tensor alignedPairRows(const at::Tensor &indices, int64_t S_kv,
                           int64_t &slots, bool &duplicate) {
  const int64_t T = indices.size(0), K = indices.size(2), P = T / 2;
  // In-range keys are members; the rest (padding, out of range) drop out
  // of the union. Key * 2 + (token within the pair), sorted per pair: a
  // key both tokens selected comes as two neighbours, first token first.
  at::Tensor x = indices.select(1, 0).to(at::kLong);
  at::Tensor inRange = x.ge(0).logical_and(x.lt(S_kv));
  at::Tensor tag =
      at::arange(T, x.options()).remainder(2).unsqueeze(1).expand({T, K});
  at::Tensor tagged = at::where(inRange, x, S_kv).mul(2).add(tag);
  at::Tensor sorted = std::get<0>(at::sort(tagged.reshape({P, 2 * K}), 1));
  at::Tensor key = sorted.div(2, "floor");
  at::Tensor token = sorted.remainder(2);
  at::Tensor real = key.lt(S_kv);
  at::Tensor fresh = at::ones_like(real);
  fresh.slice(1, 1).copy_(key.slice(1, 1).ne(key.slice(1, 0, 2 * K - 1)));
  at::Tensor slot = fresh.to(at::kLong).cumsum(1).sub(1);
  // A token that lists an in-range key twice: equal tagged neighbours.
  at::Tensor twice = sorted.slice(1, 1)
                         .eq(sorted.slice(1, 0, 2 * K - 1))
                         .logical_and(real.slice(1, 1))
                         .any();
  at::Tensor length = fresh.logical_and(real).sum(1).max();
  at::Tensor host = at::stack({length, twice.to(at::kLong)}).cpu();
  slots = std::max<int64_t>(host[0].item<int64_t>(), 1);
  duplicate = host[1].item<int64_t>() != 0;
  // Row 2p + token of the result, slot `slot`; the others go to a spare
  // column per row that is cut off.
  const int64_t width = slots + 1;
  at::Tensor out = at::full({P, 2, width}, -1, x.options().dtype(at::kInt));
  at::Tensor target =
      at::where(real, token.mul(width).add(slot), token.mul(width).add(slots));
  out.view({P, 2 * width}).scatter_(1, target, key.to(at::kInt));
  return out.slice(2, 0, slots).reshape({T, 1, slots}).contiguous();
}

TokenPairs chooseTokenPairs(PairsMode mode, const BwdArgs &args,
                            const BwdSizes &n, bool available) {
  TokenPairs pairs;
  if (mode == PairsMode::Off || !available || n.G != 1 || n.T < 2 ||
      n.T % 2 != 0 ||
      isCapturing(at::cuda::getCurrentCUDAStream().stream()))
    return pairs;
  PairsHistory *history = nullptr;
  if (mode == PairsMode::Auto && !shouldProbe(args, n, history)) {
    ++history->calls;
    return pairs;
  }
  bool duplicate = false;
  at::Tensor rows = alignedPairRows(args.indices, n.S_kv, pairs.slots,
                                    duplicate);
  pairs.use = !duplicate &&
              (mode == PairsMode::On ||
               double(pairs.slots) <= kMaxUnionRatio * double(n.K));
  if (history) {
    history->lastUsed = pairs.use;
    ++history->calls;
  }
  if (pairs.use)
    pairs.indices = rows;
  return pairs;
}

} // namespace smla::ext

namespace {
std::tuple<at::Tensor, int64_t, bool>
alignedPairRowsOp(const at::Tensor &indices, int64_t sKv) {
  TORCH_CHECK(indices.dim() == 3 && indices.size(1) == 1 &&
                  indices.scalar_type() == at::kInt,
              "smla.aligned_pair_rows: argument 'indices' must be int32 "
              "[T, 1, K], got ",
              indices.scalar_type(), " ", indices.sizes());
  TORCH_CHECK(indices.size(0) % 2 == 0 && indices.size(2) > 0,
              "smla.aligned_pair_rows: argument 'indices' needs an even "
              "token count and K >= 1, got ",
              indices.sizes());
  TORCH_CHECK(sKv >= 1, "smla.aligned_pair_rows: argument 's_kv' must be "
                        ">= 1, got ", sKv);
  int64_t slots = 0;
  bool duplicate = false;
  at::Tensor rows = smla::ext::alignedPairRows(indices, sKv, slots, duplicate);
  return {rows, slots, duplicate};
}
} // namespace

TORCH_LIBRARY_IMPL(smla, CompositeExplicitAutograd, m) {
  m.impl("aligned_pair_rows", &alignedPairRowsOp);
}
