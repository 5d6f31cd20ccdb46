//===- SlotWalk.cpp - The order the bwd kernel walks its top-k slots ------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "SlotWalk.h"

#include "KernelDirectory.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace smla::ext {

namespace {


/// The number of distinct keys that `window` consecutive tokens (from the
/// middle of the call) reduce into, as a one-element int64 device tensor
/// from fixed-size ops only, so nothing waits for the device. CTAs are
/// dispatched token (x) fastest, so one wave covers the tokens of a single
/// head block, hence of one kv group: group 0 stands for all.
at::Tensor waveRows(const BwdArgs &args, const BwdSizes &n, int64_t window) {
  int64_t t0 = (n.T - window) / 2;
  at::Tensor rows = args.indices.slice(0, t0, t0 + window).select(1, 0);
  // Invalid slots all become -1: at most one value too many.
  at::Tensor keys =
      at::where(rows.ge(0).logical_and(rows.lt(n.S_kv)), rows, -1).flatten();
  at::Tensor sorted = std::get<0>(at::sort(keys));
  int64_t m = sorted.numel();
  return sorted.slice(0, 1, m)
      .ne(sorted.slice(0, 0, m - 1))
      .sum()
      .add(1)
      .view({1});
}

/// The last measurement per key (measuredSorted): the count is copied to
/// pinned host memory behind an event and read when a later call finds it
/// done.
struct WaveProbe {
  std::mutex mutex; // guards the rest; held while an unmeasured key waits
  at::Tensor host;  // pinned int64[1]
  at::cuda::CUDAEvent done;
  bool pending = false, decided = false, sorted = false;
  int64_t calls = 0;
};
/// A new measurement every kProbeEvery calls of a key.
constexpr int64_t kProbeEvery = 8;
/// Keys remembered at once.
constexpr size_t kMaxProbes = 64;

/// Whether the rows one wave of `window` resident CTAs reduces into take
/// more fp32 bytes than `l2Bytes`. The answer depends on the indices, not
/// only on the shapes (B2 and B2r share theirs), so calls measure their own
/// indices: every kProbeEvery-th call of a key starts a measurement, and a
/// call uses the newest one that has finished; only a call on an unmeasured
/// key waits for its own (one stream synchronization per key). The key
/// (device, K, G, H, D + Dt) leaves out T and S_kv, which change with every
/// micro-batch of packed training, so a steady state never waits. Under
/// CUDA graph capture nothing is measured or allocated: the last answer of
/// the key is used, else the given order.
bool measuredSorted(const BwdArgs &args, const BwdSizes &n, int64_t window,
                    int64_t l2Bytes) {
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t>;
  static std::mutex mapMutex;
  // Leaked on purpose, like the kernel library: the pinned buffers and
  // events must not be freed from a static destructor after CUDA is gone.
  static auto &probes = *new std::map<Key, std::shared_ptr<WaveProbe>>();
  Key key{int(args.q.get_device()), n.K, n.G, n.H, n.D + n.Dt};
  const bool capturing = isCapturing(at::cuda::getCurrentCUDAStream().stream());
  std::shared_ptr<WaveProbe> probe;
  {
    std::lock_guard<std::mutex> lock(mapMutex);
    auto it = probes.find(key);
    if (it != probes.end()) {
      probe = it->second;
    } else if (!capturing) {
      // A probe still in use elsewhere lives on through its shared_ptr; a
      // pinned buffer with a copy in flight is kept by torch's host
      // allocator until the copy is done.
      if (probes.size() >= kMaxProbes)
        probes.clear();
      probe = probes[key] = std::make_shared<WaveProbe>();
    }
  }
  if (!probe)
    return false;
  std::lock_guard<std::mutex> lock(probe->mutex);
  if (capturing)
    return probe->decided && probe->sorted;
  auto read = [&] {
    probe->sorted = probe->host.item<int64_t>() * (n.D + n.Dt) * 4 > l2Bytes;
    probe->decided = true;
    probe->pending = false;
  };
  if (probe->pending && probe->done.query())
    read();
  if (!probe->pending && (!probe->decided || probe->calls % kProbeEvery == 0)) {
    if (!probe->host.defined())
      probe->host = at::empty(
          {1}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    probe->host.copy_(waveRows(args, n, window), /*non_blocking=*/true);
    probe->done.record(at::cuda::getCurrentCUDAStream());
    probe->pending = true;
  }
  if (!probe->decided) {
    probe->done.synchronize();
    read();
  }
  ++probe->calls;
  return probe->sorted;
}

/// CTAs of `bwd` that one SM of `prop` holds, from its threads and shared
/// memory (smla-compile fits the registers to the CTAs per SM it stages
/// for; the device reports the shared memory per SM and the part it keeps
/// per CTA).
int64_t residentCtasPerSm(const runtime::KernelEntry &bwd,
                          const cudaDeviceProp &prop) {
  int64_t threads =
      int64_t(bwd.launch.block[0]) * bwd.launch.block[1] * bwd.launch.block[2];
  int64_t bySmem = int64_t(prop.sharedMemPerMultiprocessor) /
                   (int64_t(bwd.launch.dynamicSmem) +
                    int64_t(prop.reservedSharedMemPerBlock));
  int64_t byThreads =
      int64_t(prop.maxThreadsPerMultiProcessor) / std::max<int64_t>(threads, 1);
  return std::max<int64_t>(1, std::min(bySmem, byThreads));
}

} // namespace

bool isCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

SlotWalk chooseSlotWalk(const WalkOptions &env, const BwdArgs &args,
                        const BwdSizes &n, const runtime::KernelEntry &bwd) {
  SlotWalk walk;
  if (!takesParam(bwd, "walk_period"))
    return walk;
  if (env.mode == WalkOptions::Given) {
    // The given order, rotated only when SMLA_WALK_PERIOD asks for it.
    walk.period = static_cast<int32_t>(std::max<int64_t>(env.period, 0));
    return walk;
  }
  const cudaDeviceProp *prop = at::cuda::getCurrentDeviceProperties();
  int64_t l2Bytes = env.l2Bytes > 0 ? env.l2Bytes : prop->l2CacheSize;
  int64_t resident =
      int64_t(prop->multiProcessorCount) * residentCtasPerSm(bwd, *prop);
  bool sorted = env.mode == WalkOptions::Sorted;
  if (env.mode == WalkOptions::Auto) {
    int64_t dkvBytes = n.S_kv * n.G * (n.D + n.Dt) * 4;
    sorted = dkvBytes > l2Bytes &&
             measuredSorted(args, n, std::min(n.T, resident), l2Bytes);
  }
  if (!sorted)
    return walk;
  walk.sorted = true;
  // Three times the resident CTAs. B2r, sorted rows, four chunks: 17.6-17.9
  // ms; twice 17.9-18.2, once 21.1, no rotation 18.1-18.7, the given order
  // 23.6-24.3 (docs/runtime.md, "The slot walk").
  walk.period = static_cast<int32_t>(
      env.period >= 0 ? env.period
                      : std::min<int64_t>(3 * resident, INT32_MAX));
  // Whole waves of resident CTAs per chunk where the workspace allows: a
  // chunk boundary drains the GPU (B2r at period 2x: 18.16 ms in chunks of
  // 2730 tokens, 17.63 in chunks of 2112 = 8 waves).
  int64_t chunk = std::max<int64_t>(1, kSortWorkspaceBytes / (n.G * n.K * 12));
  if (chunk >= resident && chunk < n.T)
    chunk -= chunk % resident;
  walk.chunkTokens = env.chunkTokens > 0 ? env.chunkTokens : chunk;
  return walk;
}

at::Tensor sortedIndexRows(const at::Tensor &indices, int64_t t0, int64_t t1) {
  return std::get<0>(at::sort(indices.slice(0, t0, t1), /*dim=*/-1))
      .contiguous();
}

int64_t tokenRowBytes(const at::Tensor &dq) {
  if (!dq.defined() || !dq.is_contiguous() || dq.dim() < 1 ||
      dq.size(0) == 0)
    return 0;
  return dq.numel() / dq.size(0) * dq.element_size();
}

SortSpace sortSpace(const at::Tensor &dq, const at::Tensor &dkv,
                    const BwdSizes &n) {
  SortSpace space;
  const int64_t dqTokenBytes = tokenRowBytes(dq);
  if (dqTokenBytes == 0 || dq.size(0) != n.T || !dkv.defined() ||
      !dkv.is_contiguous())
    return space;
  const int64_t perToken = n.G * n.K;
  const int64_t dkvBytes = dkv.numel() * dkv.element_size();
  if (dqTokenBytes % 8 != 0 || dkvBytes % 4 != 0 ||
      dqTokenBytes < 8 * perToken)
    return space;
  space.values = dkv.view({-1}).view(at::kByte).view(at::kInt);
  space.order = dq.view({-1}).view(at::kByte).view(at::kLong);
  space.orderPerToken = dqTokenBytes / 8;
  space.maxTokens = space.values.numel() / perToken;
  return space;
}

at::Tensor sortedIndexRowsInto(const at::Tensor &indices, int64_t t0,
                               int64_t t1, const SortSpace &space) {
  at::Tensor rows = indices.slice(0, t0, t1);
  const int64_t count = rows.numel();
  TORCH_CHECK(t1 - t0 <= space.maxTokens, kOpName,
              ": internal error: a sort chunk of ", t1 - t0,
              " tokens exceeds the outputs' room for ", space.maxTokens);
  at::Tensor values = space.values.narrow(0, 0, count).view(rows.sizes());
  at::Tensor order = space.order.narrow(0, t0 * space.orderPerToken, count)
                         .view(rows.sizes());
  at::sort_out(values, order, rows, /*dim=*/-1);
  return values;
}

} // namespace smla::ext
