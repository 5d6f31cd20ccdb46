//===- TokenPairs.cpp - Key sharing between neighbouring tokens ----------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "TokenPairs.h"
#include "SlotWalk.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace smla::ext {
namespace {

/// A key's union is measured by the call that finds it unmeasured (which
/// waits for the answer) and again on every kProbeEvery-th call after it, without
/// waiting: the measurement is copied to pinned host memory behind an
/// event, and the earliest call that finds the event done takes its answer.
/// The indices, not the sizes, decide (B2 and B2r share theirs), so the key
/// leaves out T and S_kv, which change with every micro-batch of packed
/// training: a steady state reads nothing back, whatever T is.
constexpr int64_t kProbeEvery = 8;

struct PairsHistory {
  int64_t calls = 0;
  bool decided = false, lastUsed = false;
  bool pending = false;
  at::Tensor host; // pinned double[1]: the measured mean length / K
  std::unique_ptr<at::cuda::CUDAEvent> done;
};

using HistoryKey = std::tuple<int, int64_t, int64_t, int64_t>;

HistoryKey historyKey(const BwdArgs &args, const BwdSizes &n) {
  return {int(args.q.get_device()), n.K, n.H, n.D + n.Dt};
}

/// The auto choice's memory per key, under its mutex. Leaked on purpose:
/// the pinned buffers and events must not be freed from a static
/// destructor after CUDA is gone.
std::map<HistoryKey, PairsHistory> &histories(std::mutex *&mutex) {
  static std::mutex m;
  static auto &map = *new std::map<HistoryKey, PairsHistory>();
  mutex = &m;
  return map;
}

void decide(PairsHistory &history, double meanRatio) {
  history.decided = true;
  history.lastUsed = meanRatio <= kMaxUnionRatio;
}

} // namespace

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
    return {false, PairsProbe::None, "SMLA_PAIRS=off"};
  // SMLA_PAIRS=on insists: a call that cannot run on pairs says why.
  auto refuse = [&](const char *why) {
    TORCH_CHECK(mode != PairsMode::On, kOpName,
                ": SMLA_PAIRS=on, but the call cannot run on token pairs: ",
                why);
    return PairsTry{false, PairsProbe::None, why};
  };
  if (!available)
    return refuse("the kernel library has no tokens=2 kernel for it");
  if (n.G != 1 || n.T % 2 != 0)
    return refuse("it needs G = 1 and an even number of tokens");
  if (mode == PairsMode::On)
    return {true, PairsProbe::None, "SMLA_PAIRS=on"};
  std::mutex *mutex = nullptr;
  auto &map = histories(mutex);
  std::lock_guard<std::mutex> lock(*mutex);
  PairsHistory &history = map[historyKey(args, n)];
  // A CUDA graph cannot hold a measurement: a capture follows the last
  // answer, and a key never measured runs per token.
  if (isCapturing(at::cuda::getCurrentCUDAStream().stream()))
    return {history.decided && history.lastUsed, PairsProbe::None,
            history.decided ? "auto, the last measurement (under capture)"
                            : "auto, never measured (under capture)"};
  if (history.pending && history.done->query()) {
    decide(history, history.host.data_ptr<double>()[0]);
    history.pending = false;
  }
  const bool due = !history.pending && history.calls % kProbeEvery == 0;
  ++history.calls;
  if (!history.decided)
    return {true, PairsProbe::Wait, "auto, measured by this call"};
  return {history.lastUsed, due ? PairsProbe::Async : PairsProbe::None,
          history.lastUsed ? "auto, the last measured union pays"
                           : "auto, the last measured union does not pay"};
}

bool pairsPay(const BwdArgs &args, const BwdSizes &n,
              const at::Tensor &lengths, PairsProbe probe) {
  // The mean length over K, on the device.
  at::Tensor ratio =
      lengths.to(at::kDouble).mean().div(double(n.K)).view({1});
  std::mutex *mutex = nullptr;
  auto &map = histories(mutex);
  std::lock_guard<std::mutex> lock(*mutex);
  PairsHistory &history = map[historyKey(args, n)];
  if (!history.host.defined())
    history.host = at::empty(
        {1}, at::TensorOptions().dtype(at::kDouble).pinned_memory(true));
  if (!history.done)
    history.done = std::make_unique<at::cuda::CUDAEvent>();
  history.host.copy_(ratio, /*non_blocking=*/true);
  history.done->record(at::cuda::getCurrentCUDAStream());
  if (probe == PairsProbe::Async) {
    history.pending = true;
    return history.lastUsed;
  }
  history.done->synchronize();
  decide(history, history.host.data_ptr<double>()[0]);
  return history.lastUsed;
}

int64_t pairRowsInDq(const at::Tensor &dq, int64_t K) {
  const int64_t bytes = tokenRowBytes(dq);
  const int64_t width = bytes / int64_t(sizeof(int32_t));
  return bytes % int64_t(sizeof(int32_t)) == 0 && width >= 2 * K ? width : 0;
}

int64_t pairChunk(const PairsOptions &env, const BwdSizes &n,
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
