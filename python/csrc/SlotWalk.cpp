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
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace smla::ext {
namespace {

/// An integer environment variable in [min, 2^31), or -1 when unset.
int64_t envInt(const char *name, int64_t min) {
  const char *value = std::getenv(name);
  if (value == nullptr || *value == '\0')
    return -1;
  char *end = nullptr;
  long long v = std::strtoll(value, &end, 10);
  bool ok = end != value && *end == '\0' && v >= min && v <= INT32_MAX;
  TORCH_CHECK(ok, kOpName, ": environment variable ", name,
              " must be an integer in [", min, ", 2^31), got '", value, "'");
  return v;
}

/// CTAs of `bwd` that one SM holds, from its threads and shared memory
/// (smla-compile fits the registers to the CTAs per SM it stages for).
int64_t residentCtasPerSm(const runtime::KernelEntry &bwd) {
  constexpr int64_t kSmemPerSm = 233472, kReservedPerCta = 1024,
                    kThreadsPerSm = 2048;
  int64_t threads = int64_t(bwd.launch.block[0]) * bwd.launch.block[1] *
                    bwd.launch.block[2];
  int64_t bySmem = kSmemPerSm / (bwd.launch.dynamicSmem + kReservedPerCta);
  int64_t byThreads = kThreadsPerSm / std::max<int64_t>(threads, 1);
  return std::max<int64_t>(1, std::min(bySmem, byThreads));
}

/// The number of distinct (group, key) rows that `window` consecutive
/// tokens (from the middle of the call) reduce into, as a one-element int64
/// device tensor: fixed-size ops only, so nothing waits for the device.
at::Tensor waveRows(const BwdArgs &args, const BwdSizes &n, int64_t window) {
  int64_t t0 = (n.T - window) / 2;
  at::Tensor rows = args.indices.slice(0, t0, t0 + window);
  at::Tensor valid = rows.ge(0).logical_and(rows.lt(n.S_kv));
  at::Tensor groupBase =
      at::arange(n.G, rows.options().dtype(at::kLong)).mul(n.S_kv).view(
          {1, n.G, 1});
  // Invalid slots all become -1: at most one value too many.
  at::Tensor keys =
      at::where(valid, rows.to(at::kLong).add(groupBase), int64_t(-1))
          .flatten();
  at::Tensor sorted = std::get<0>(at::sort(keys));
  int64_t m = sorted.numel();
  return sorted.slice(0, 1, m).ne(sorted.slice(0, 0, m - 1)).sum().add(1).view(
      {1});
}

bool isCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

/// The last measurement per (device, shape): the count is copied to pinned
/// host memory behind an event and read when a later call finds it done.
struct WaveProbe {
  at::Tensor host; // pinned int64[1]
  at::cuda::CUDAEvent done;
  bool pending = false, decided = false, sorted = false;
};

/// Whether the rows one wave of `window` resident CTAs reduces into take
/// more fp32 bytes than L2 holds. The answer depends on the indices, not
/// only on the shapes (B2 and B2r share theirs), so every call measures its
/// own indices; a call uses the newest finished measurement of its shape,
/// and waits for its own only when there is none yet (one stream
/// synchronization per shape). Under CUDA graph capture nothing is measured
/// and the last answer (else the given order) is used.
bool measuredSorted(const BwdArgs &args, const BwdSizes &n, int64_t window,
                    int64_t l2Bytes) {
  static std::mutex mutex;
  // Leaked on purpose, like the kernel library: the pinned buffers and
  // events must not be freed from a static destructor after CUDA is gone.
  static auto &probes =
      *new std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t,
                               int64_t, int64_t>,
                    std::unique_ptr<WaveProbe>>();
  auto key = std::make_tuple(int(args.q.get_device()), n.T, n.S_kv, n.K, n.G,
                             n.H, n.D + n.Dt);
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<WaveProbe> &probe = probes[key];
  if (!probe) {
    probe = std::make_unique<WaveProbe>();
    probe->host = at::empty(
        {1}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  }
  auto read = [&] {
    probe->sorted = probe->host.item<int64_t>() * (n.D + n.Dt) * 4 > l2Bytes;
    probe->decided = true;
    probe->pending = false;
  };
  cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  if (isCapturing(stream))
    return probe->decided && probe->sorted;
  if (probe->pending && probe->done.query())
    read();
  if (!probe->pending) {
    probe->host.copy_(waveRows(args, n, window), /*non_blocking=*/true);
    probe->done.record(at::cuda::getCurrentCUDAStream());
    probe->pending = true;
  }
  if (!probe->decided) {
    probe->done.synchronize();
    read();
  }
  return probe->sorted;
}

} // namespace

WalkEnvironment readWalkEnvironment() {
  WalkEnvironment env;
  const char *value = std::getenv("SMLA_WALK");
  std::string mode = value != nullptr ? value : "";
  TORCH_CHECK(mode.empty() || mode == "auto" || mode == "sorted" ||
                  mode == "given",
              kOpName,
              ": environment variable SMLA_WALK must be auto, sorted or "
              "given, got '",
              mode, "'");
  env.mode = mode == "sorted"  ? WalkEnvironment::Sorted
             : mode == "given" ? WalkEnvironment::Given
                               : WalkEnvironment::Auto;
  env.period = envInt("SMLA_WALK_PERIOD", 0);
  env.chunkTokens = envInt("SMLA_WALK_CHUNK_TOKENS", 1);
  return env;
}

SlotWalk chooseSlotWalk(const WalkEnvironment &env, const BwdArgs &args,
                        const BwdSizes &n, const runtime::KernelEntry &bwd) {
  SlotWalk walk;
  if (env.mode == WalkEnvironment::Given || !takesParam(bwd, "walk_period"))
    return walk;
  const cudaDeviceProp *prop = at::cuda::getCurrentDeviceProperties();
  int64_t l2Bytes = prop->l2CacheSize;
  int64_t resident = int64_t(prop->multiProcessorCount) *
                     residentCtasPerSm(bwd);
  bool sorted = env.mode == WalkEnvironment::Sorted;
  if (env.mode == WalkEnvironment::Auto) {
    int64_t dkvBytes = n.S_kv * n.G * (n.D + n.Dt) * 4;
    sorted = dkvBytes > l2Bytes &&
             measuredSorted(args, n, std::min(n.T, resident), l2Bytes);
  }
  if (!sorted)
    return walk;
  walk.sorted = true;
  // Twice the resident CTAs: 1.44x on B2r against 1.36x for once and 1.21x
  // for no rotation (sorted rows in every case; docs/performance.md).
  walk.period = static_cast<int32_t>(
      env.period >= 0 ? env.period : std::min<int64_t>(2 * resident, INT32_MAX));
  // Whole waves of resident CTAs per chunk where the workspace allows: a
  // chunk boundary drains the GPU (B2r: 3 chunks of 2730 tokens cost 1.06x
  // the time of 4 of 2112).
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

} // namespace smla::ext
