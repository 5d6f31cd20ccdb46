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

/// A shape's union is measured on its first call and again every
/// kProbeEvery calls (the indices, not the shape, decide: B2 and B2r share
/// theirs); the calls between follow the last answer without a read-back.
constexpr int64_t kProbeEvery = 8;

struct PairsHistory {
  int64_t calls = 0;
  bool measured = false, lastUsed = false;
};

using HistoryKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t>;

HistoryKey historyKey(const BwdArgs &args, const BwdSizes &n) {
  return {int(args.q.get_device()), n.T, n.S_kv, n.K, n.H};
}

/// The auto choice's memory per shape, under its mutex. Leaked on
/// purpose: nothing to free from a static destructor.
std::map<HistoryKey, PairsHistory> &histories(std::mutex *&mutex) {
  static std::mutex m;
  static auto &map = *new std::map<HistoryKey, PairsHistory>();
  mutex = &m;
  return map;
}

} // namespace

PairsEnvironment readPairsEnvironment() {
  PairsEnvironment env;
  env.mode = static_cast<PairsMode>(
      readEnvChoice("SMLA_PAIRS", {"auto", "on", "off"}));
  std::string wrong = readEnvInt("SMLA_PAIRS_CHUNK", 1, env.chunk);
  TORCH_CHECK(wrong.empty(), kOpName, ": ", wrong);
  env.rowsInDq = readEnvChoice("SMLA_PAIRS_ROWS", {"dq", "workspace"}) == 0;
  return env;
}

at::Tensor alignedPairRows(const at::Tensor &indices, int64_t S_kv,
                           int64_t &slots, bool &duplicate) {
  const int64_t T = indices.size(0), K = indices.size(2), P = T / 2;
  // Each row sorted, out-of-range slots (padding) replaced by S_kv so that
  // they sort last; int32 throughout but for the positions.
  at::Tensor x = indices.select(1, 0);
  at::Tensor rows = std::get<0>(at::sort(
      at::where(x.ge(0).logical_and(x.lt(S_kv)), x, S_kv), /*dim=*/1));
  at::Tensor pairs = rows.view({P, 2, K});
  at::Tensor a = pairs.select(1, 0).contiguous();
  at::Tensor b = pairs.select(1, 1).contiguous();
  at::Tensor twice = rows.slice(1, 1)
                         .eq(rows.slice(1, 0, K - 1))
                         .logical_and(rows.slice(1, 1).lt(S_kv))
                         .any();
  // The union slot of a key: the distinct keys below it. For a of the
  // first row at position i: i of its own row, the second row's keys
  // below it (a binary search), less the shared keys below it (counted
  // twice), an exclusive prefix count of the first row's shared keys.
  auto place = [&](const at::Tensor &own, const at::Tensor &other,
                   at::Tensor &shared) {
    at::Tensor below = at::searchsorted(other, own);
    shared = other.gather(1, below.clamp_max(K - 1))
                 .eq(own)
                 .logical_and(own.lt(S_kv));
    at::Tensor sharedBelow =
        shared.to(at::kLong).cumsum(1).sub(shared.to(at::kLong));
    return below.sub(sharedBelow).add(
        at::arange(K, below.options()).unsqueeze(0));
  };
  at::Tensor sharedA, sharedB;
  at::Tensor slotA = place(a, b, sharedA);
  at::Tensor slotB = place(b, a, sharedB);
  at::Tensor length = a.lt(S_kv)
                          .sum(1)
                          .add(b.lt(S_kv).sum(1))
                          .sub(sharedA.sum(1))
                          .max();
  at::Tensor host = at::stack({length, twice.to(at::kLong)}).cpu();
  slots = std::max<int64_t>(host[0].item<int64_t>(), 1);
  duplicate = host[1].item<int64_t>() != 0;
  // Slot `slot` of its row; padding goes to a spare column that is cut.
  at::Tensor out = at::full({P, 2, slots + 1}, -1, x.options());
  for (auto [row, own, slot] :
       {std::tuple{0, a, slotA}, std::tuple{1, b, slotB}}) {
    at::Tensor valid = own.lt(S_kv);
    out.select(1, row).scatter_(1, at::where(valid, slot, slots),
                                at::where(valid, own, -1));
  }
  return out.slice(2, 0, slots).reshape({T, 1, slots}).contiguous();
}

PairsTry tryTokenPairs(PairsMode mode, const BwdArgs &args,
                       const BwdSizes &n, bool available) {
  if (mode == PairsMode::Off)
    return PairsTry::No;
  // SMLA_PAIRS=on insists: a call that cannot run on pairs says why.
  auto refuse = [&](const char *why) {
    TORCH_CHECK(mode != PairsMode::On, kOpName,
                ": SMLA_PAIRS=on, but the call cannot run on token pairs: ",
                why);
    return PairsTry::No;
  };
  if (!available)
    return refuse("the kernel library has no tokens=2 kernel for it");
  if (n.G != 1 || n.T % 2 != 0)
    return refuse("it needs G = 1 and an even number of tokens");
  if (mode == PairsMode::On)
    return PairsTry::Trust;
  std::mutex *mutex = nullptr;
  auto &map = histories(mutex);
  std::lock_guard<std::mutex> lock(*mutex);
  if (map.size() > 64)
    map.clear();
  PairsHistory &history = map[historyKey(args, n)];
  // A CUDA graph cannot hold the read-back: a capture follows the last
  // answer, and a shape never measured runs per token.
  if (isCapturing(at::cuda::getCurrentCUDAStream().stream()))
    return history.measured && history.lastUsed ? PairsTry::Trust
                                                : PairsTry::No;
  const bool due = !history.measured || history.calls % kProbeEvery == 0;
  ++history.calls;
  if (due)
    return PairsTry::Probe;
  return history.lastUsed ? PairsTry::Trust : PairsTry::No;
}

bool pairsPay(const BwdArgs &args, const BwdSizes &n, double meanLength) {
  bool use = meanLength <= kMaxUnionRatio * double(n.K);
  std::mutex *mutex = nullptr;
  auto &map = histories(mutex);
  std::lock_guard<std::mutex> lock(*mutex);
  PairsHistory &history = map[historyKey(args, n)];
  history.measured = true;
  history.lastUsed = use;
  return use;
}

int64_t pairRowsInDq(const at::Tensor &dq, int64_t K) {
  const int64_t bytes = tokenRowBytes(dq);
  const int64_t width = bytes / int64_t(sizeof(int32_t));
  return bytes % int64_t(sizeof(int32_t)) == 0 && width >= 2 * K ? width : 0;
}

int64_t pairChunk(const PairsEnvironment &env, const BwdSizes &n,
                  bool rowsInDq) {
  const int64_t pairs = n.T / 2;
  if (env.chunk > 0)
    return std::min(env.chunk, pairs);
  if (rowsInDq)
    return pairs;
  // Per pair: two rows of 2K slots.
  const int64_t perPair = 2 * 2 * n.K * int64_t(sizeof(int32_t));
  const int64_t most = std::max<int64_t>(1, kPairRowsBytes / perPair);
  const int64_t chunks = (pairs + most - 1) / most;
  return (pairs + chunks - 1) / chunks;
}

at::Tensor paddingSlots(const at::Tensor &lengths, int64_t K, int64_t width,
                        int64_t block) {
  at::Tensor walked = at::floor_divide(lengths.to(at::kLong).add(block - 1),
                                       block)
                          .mul(block)
                          .clamp(K, width);
  return walked.sub(K).sum().mul(2);
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

// Python calls it through smla._compiled.aligned_pair_rows, which checks
// the arguments first: on the H200's torch 2.11 an error thrown from this
// op crashed the process, while the same checks raise
// normally with later torch versions.
TORCH_LIBRARY_IMPL(smla, CPU, m) {
  m.impl("aligned_pair_rows", &alignedPairRowsOp);
}

TORCH_LIBRARY_IMPL(smla, CUDA, m) {
  m.impl("aligned_pair_rows", &alignedPairRowsOp);
}
