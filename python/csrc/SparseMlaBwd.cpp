//===- SparseMlaBwd.cpp - The implementations of smla::sparse_mla_bwd -----===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// smla::_launch_bwd, the private op that torch.ops.smla.sparse_mla_bwd
// (smla/_op.py) runs on arguments it has checked and laid out (LaunchArgs.h):
// base-2 lse, contiguous tensors, the heads of a library kernel. It
// allocates the outputs (dkv_accum fp32 zeroed), then on the current stream
//   1. Delta: the caller's `delta` when given (SparseMLA folds an lse
//      gradient into it), else none (a null `delta`: the bwd kernel
//      computes rowsum(o * do) in its prologue, which costs less than a
//      separate pass over o and do). A given delta needs a bwd kernel with
//      a `delta` parameter;
//   2. the "bwd" kernel: dq in its compiled type, fp32 reductions into
//      dkv_accum, guard counters (on token pairs over aligned index rows
//      when TokenPairs.h says so, reading the same Delta as [T / 2, 2H]);
//      on row-sorted indices, chunk by chunk, when SlotWalk.h says so;
//   3. dkv = dkv_accum cast to dkv_dtype: a "dkv_cast" kernel, else torch
//      (nothing to cast for fp32, which returns dkv_accum itself). The
//      cast kernel counts dkv's non-finite rows (counters[3]; the bwd
//      kernel counts dq's); for fp32 a count-only "dkv_cast" kernel does,
//      where the library has one, else torch.
// A bwd kernel always accumulates into fp32 dkv_accum, so one compiled for
// dkv_type=bf16 also serves an fp32 dkv request and vice versa. The op is
// registered for CUDA only: the public op's one implementation answers
// every other device, and its fake implementation serves torch.compile.
//
//===----------------------------------------------------------------------===//

#include "KernelChoice.h"
#include "KernelDirectory.h"
#include "LaunchArgs.h"
#include "Options.h"
#include "SlotWalk.h"
#include "TokenPairs.h"

#include "smla/runtime/Error.h"
#include "smla/runtime/Launcher.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>

namespace smla::ext {
namespace {

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
// invalid_slots, dead_rows, clamped, nonfinite_rows (smla/contract.py)
constexpr int64_t kNumCounters = 4;
constexpr int64_t kNonFiniteRows = 3;

/// The tensors a kernel may read or write; undefined ones pass as null.
struct KernelTensors {
  at::Tensor q, kv, o, dout, indices, lse, positions;
  at::Tensor dq, dkvAccum, dkv, counters, delta, topkLength;
};

runtime::ParamValue ptrOf(const at::Tensor &t) {
  return runtime::ParamValue::ptr(t.defined() ? t.data_ptr() : nullptr);
}

/// Every argument any smla kernel may take, by the name the compiler gives
/// the parameter. Kernels ignore names they do not take, so one map serves
/// every kind. This is the one place to adapt when the names change.
runtime::ParamValues kernelParams(const KernelTensors &t, const BwdSizes &n,
                                  double smScale, int32_t walkPeriod = 0) {
  using runtime::ParamValue;
  return {
      {"q", ptrOf(t.q)},
      {"kv", ptrOf(t.kv)},
      {"o", ptrOf(t.o)},
      {"dout", ptrOf(t.dout)},
      {"do", ptrOf(t.dout)},
      {"indices", ptrOf(t.indices)},
      {"lse", ptrOf(t.lse)},
      {"positions", ptrOf(t.positions)},
      {"q_positions", ptrOf(t.positions)},
      {"dq", ptrOf(t.dq)},
      {"dkv_accum", ptrOf(t.dkvAccum)},
      {"dkv", ptrOf(t.dkv)},
      {"counters", ptrOf(t.counters)},
      {"delta", ptrOf(t.delta)},
      // Slots per token: null means K for every token.
      {"topk_length", ptrOf(t.topkLength)},
      {"T", ParamValue::i32(static_cast<int32_t>(n.T))},
      {"S_kv", ParamValue::i32(static_cast<int32_t>(n.S_kv))},
      {"K", ParamValue::i32(static_cast<int32_t>(n.K))},
      {"H", ParamValue::i32(static_cast<int32_t>(n.H))},
      {"G", ParamValue::i32(static_cast<int32_t>(n.G))},
      {"sm_scale", ParamValue::f32(static_cast<float>(smScale))},
      {"walk_period", ParamValue::i32(walkPeriod)},
  };
}

/// The per-token rows [t0, t1) of every per-token tensor of `t` (kv, dkv
/// and the counters are shared by all tokens). All of them (one launch)
/// are `t` itself: the kernels take only data pointers, and each slice is
/// an ATen call on the host path that the GPU waits for at a call's start
/// (0.1-0.3 ms of host time exposed per call on B2, measured with the GPU
/// idle at the call's start).
KernelTensors tokenRows(const KernelTensors &t, int64_t t0, int64_t t1) {
  if (t0 == 0 && t1 == t.q.size(0))
    return t;
  KernelTensors c = t;
  for (at::Tensor *x :
       {&c.q, &c.o, &c.dout, &c.indices, &c.lse, &c.positions, &c.dq, &c.delta})
    if (x->defined())
      *x = x->slice(0, t0, t1);
  return c;
}

/// Nothing to compute (T is 0): empty gradients of the right shapes, zero
/// dkv and zero counters.
Outputs emptyProblem(const BwdArgs &args) {
  at::Tensor dq = at::zeros_like(args.q, args.q.options().dtype(args.dqDtype));
  at::Tensor dkv =
      at::zeros_like(args.kv, args.kv.options().dtype(args.dkvDtype));
  at::Tensor counters =
      at::zeros({kNumCounters}, args.q.options().dtype(at::kLong));
  return {dq, dkv, counters};
}

/// counters[kNonFiniteRows] += the rows of `dkv` ([S_kv, G, W]) holding a
/// NaN or an Inf, with ATen ops on the stream (no read-back): for results
/// that no counting dkv_cast kernel produced.
void countNonFiniteRows(const at::Tensor &dkv, const at::Tensor &counters) {
  counters.select(0, kNonFiniteRows)
      .add_(at::isfinite(dkv).logical_not().any(-1).sum());
}

/// Key sharing (TokenPairs.h): chunks of token pairs, each chunk's aligned
/// rows built by the pair-union kernel ([2P, 1, W] and a length per pair;
/// in dq's memory where a token's dq row holds W >= 2K int32, else in a
/// workspace with W = 2K) and run on the pair kernel (P CTAs, 2H rows,
/// each walking the blocks below its pair's length), all on the stream
/// without a read-back but for the first chunk's lengths on a Wait probe.
/// A probe measures the first chunk's lengths (pairsPay). Returns false,
/// having run nothing but that chunk's union, when the call is not to run
/// on pairs (`pairs.run` false, or a Wait probe finds that they do not
/// pay); the walked padding's invalid slots are subtracted from the
/// counter.
bool launchPairs(const BwdArgs &args, const BwdSizes &n, KernelTensors &t,
                 runtime::KernelLibrary &library,
                 const runtime::KernelEntry &pairBwd,
                 const runtime::KernelEntry &pairUnion,
                 const PairsOptions &pairsEnv, const PairsTry &how,
                 const WalkOptions &walkEnv, CUstream stream) {
  const int64_t pairs = n.T / 2;
  const int64_t inDq = pairsEnv.rowsInDq ? pairRowsInDq(t.dq, n.K) : 0;
  const int64_t width = inDq ? inDq : 2 * n.K;
  const int64_t chunk = pairChunk(pairsEnv, n, inDq != 0);
  const int32_t period =
      static_cast<int32_t>(std::max<int64_t>(walkEnv.period, 0));
  const at::TensorOptions i32 = args.indices.options();
  at::Tensor lengths = at::empty({pairs}, i32);
  // Token t's row in dq's memory of token t (every chunk's rows in place),
  // else one workspace for every chunk's rows: the stream orders its reuse.
  at::Tensor rows =
      inDq ? t.dq.view({n.T, -1}).view(at::kInt).view({n.T, 1, width})
           : at::empty({2 * chunk, 1, width}, i32);
  for (int64_t p0 = 0; p0 < pairs; p0 += chunk) {
    const int64_t p1 = std::min(pairs, p0 + chunk);
    KernelTensors c = tokenRows(t, 2 * p0, 2 * p1);
    BwdSizes pn = n;
    pn.T = p1 - p0;
    pn.H = 2 * n.H;
    const bool whole = p0 == 0 && p1 == pairs;
    at::Tensor chunkRows = whole ? rows
                           : inDq ? rows.slice(0, 2 * p0, 2 * p1)
                                  : rows.slice(0, 0, 2 * pn.T);
    at::Tensor chunkLengths = whole ? lengths : lengths.slice(0, p0, p1);
    runtime::ParamValues params = kernelParams(c, pn, args.smScale);
    params.insert_or_assign("pair_rows", ptrOf(chunkRows));
    params.insert_or_assign("pair_lengths", ptrOf(chunkLengths));
    params.insert_or_assign(
        "pair_width", runtime::ParamValue::i32(static_cast<int32_t>(width)));
    library.launch(pairUnion, stream,
                   runtime::GridSizes{pn.T, n.S_kv, n.K, pn.H, n.G}, params);
    if (p0 == 0 && how.probe != PairsProbe::None) {
      // A Wait probe decides this call; an Async one the calls after it.
      bool pay = pairsPay(args, n, chunkLengths, how.probe);
      if (!(how.probe == PairsProbe::Wait ? pay : how.run))
        return false;
    }
    c.indices = chunkRows;
    pn.K = width;
    params = kernelParams(c, pn, args.smScale, period);
    params.insert_or_assign("pair_lengths", ptrOf(chunkLengths));
    library.launch(pairBwd, stream,
                   runtime::GridSizes{pn.T, n.S_kv, pn.K, pn.H, n.G}, params);
  }
  t.counters.select(0, 0).sub_(
      paddingSlots(lengths, n.K, width, pairBwd.config.block.value_or(1)));
  return true;
}

/// The call's kernels for `config` (its bwd kernel already selected) on
/// `args`.
Outputs launchKernels(const BwdArgs &args, const BwdSizes &n,
                      const BwdConfig &config, const BwdSelection &selection,
                      const OpOptions &options) {
  const WalkOptions &walkEnv = options.walk;
  const PairsOptions &pairsEnv = options.pairs;
  const bool hasPositions = config.positions;
  const bool castDkv = args.dkvDtype != at::kFloat;
  checkDeviceTarget(selection.library, args.q.get_device());
  runtime::KernelLibrary &library = *selection.library.library;
  const runtime::KernelEntry &bwd = *selection.bwd;
  Choice &choice = lastChoice();
  choice = Choice{bwd.name, selection.library.directory, "", ""};

  const at::TensorOptions f32 = args.q.options().dtype(at::kFloat);
  KernelTensors t;
  t.q = args.q;
  t.kv = args.kv;
  t.o = args.o;
  t.dout = args.dout;
  t.indices = args.indices;
  t.lse = args.lse;
  if (hasPositions)
    t.positions = *args.qPositions;
  // The kernel writes every dq row (dead rows as zeros). Contiguous: the
  // token pairs may keep their index rows in it (TokenPairs.h).
  t.dq = at::empty(args.q.sizes(), args.q.options().dtype(args.dqDtype));
  t.dkvAccum = at::zeros_like(args.kv, f32);
  t.counters = at::zeros({kNumCounters}, args.q.options().dtype(at::kLong));

  const runtime::GridSizes sizes{n.T, n.S_kv, n.K, n.H, n.G};
  const CUstream stream =
      static_cast<CUstream>(at::cuda::getCurrentCUDAStream().stream());

  // Delta: the caller's, else null (the bwd kernel computes rowsum(o * do)
  // itself).
  if (args.delta.has_value() && args.delta->defined()) {
    TORCH_CHECK(takesParam(bwd, "delta"), kOpName,
                ": argument 'delta' cannot be passed to ", bwd.describe(),
                ": the kernel library in '", selection.library.directory,
                "' predates the kernels' delta parameter; rebuild it "
                "(python/USAGE.md, \"Kernels outside the library\")");
    t.delta = *args.delta;
  }

  // dkv in the requested type, allocated after the bwd launches: they do
  // not take it, and every ATen call before their launch is host time the
  // GPU waits for at the call's start. The sorted walk allocates it first:
  // it sorts into it (SlotWalk.h, SortSpace).
  auto allocateDkv = [&] {
    if (castDkv && !t.dkv.defined())
      t.dkv = at::empty(args.kv.sizes(), args.kv.options().dtype(args.dkvDtype));
  };
  auto finish = [&](KernelTensors &t) -> Outputs {
    BwdConfig castConfig = config;
    castConfig.dqDtype = bwd.config.dqType.value_or("bf16") == "f32"
                             ? at::kFloat
                             : at::kBFloat16;
    const runtime::KernelEntry *cast =
        library.match(makeRequest("dkv_cast", castConfig));
    const bool castCounts = cast && takesParam(*cast, "counters");
    if (!castDkv) {
      // fp32: dkv_accum is the result; a count-only cast kernel, if any.
      if (castCounts)
        library.launch(*cast, stream, sizes, kernelParams(t, n, args.smScale));
      else
        countNonFiniteRows(t.dkvAccum, t.counters);
      return {t.dq, t.dkvAccum, t.counters};
    }
    allocateDkv();
    if (cast)
      library.launch(*cast, stream, sizes, kernelParams(t, n, args.smScale));
    else
      t.dkv.copy_(t.dkvAccum);
    if (!castCounts)
      countNonFiniteRows(t.dkv, t.counters);
    return {t.dq, t.dkv, t.counters};
  };

  // Key sharing (TokenPairs.h): token pairs over aligned rows, reading the
  // call's Delta (if any) as [T / 2, 2H].
  const runtime::KernelEntry *pairBwd = findBwd(library, config, 2);
  if (pairBwd && t.delta.defined() && !takesParam(*pairBwd, "delta"))
    pairBwd = nullptr;
  const runtime::KernelEntry *pairUnion = nullptr;
  if (pairBwd) {
    runtime::KernelRequest request = makeRequest("pair_union", config);
    request.heads = n.H * 2;
    request.tokens = 2;
    request.dqType = pairBwd->config.dqType.value_or(request.dqType);
    request.dkvType = pairBwd->config.dkvType.value_or(request.dkvType);
    pairUnion = library.match(request);
  }
  const PairsTry pairs =
      tryTokenPairs(pairsEnv.mode, args, n, pairBwd && pairUnion);
  if ((pairs.run || pairs.probe != PairsProbe::None) &&
      launchPairs(args, n, t, library, *pairBwd, *pairUnion, pairsEnv, pairs,
                  walkEnv, stream)) {
    choice.kernel = pairBwd->name;
    choice.pairs = std::string("token pairs (") + pairs.why + ")";
    return finish(t);
  }
  choice.pairs = std::string("per token (") + pairs.why + ")";
  const SlotWalk walk = chooseSlotWalk(walkEnv, args, n, bwd);
  choice.walk = walk.sorted ? "sorted, period " + std::to_string(walk.period) +
                                  ", chunks of " +
                                  std::to_string(walk.chunkTokens) + " tokens"
                : walk.period ? "given, period " + std::to_string(walk.period)
                              : "given";
  if (!walk.sorted) {
    library.launch(bwd, stream, sizes,
                   kernelParams(t, n, args.smScale, walk.period));
  } else {
    // Row-sorted indices, a bounded chunk of tokens per launch, sorted into
    // the outputs' memory where it holds a chunk (SlotWalk.h).
    // Chunks of at most what dkv holds. Under SMLA_WALK=auto on the H200
    // that changes nothing: the walk is sorted only when the fp32 dKV
    // exceeds the 50 MB L2, and then the bf16 dkv holds a chunk's sorted
    // rows (at most a third of kSortWorkspaceBytes, 21.3 MiB).
    allocateDkv();
    const SortSpace space = sortSpace(t.dq, t.dkv, n);
    const bool inOutputs = space.usable();
    const int64_t chunkTokens =
        inOutputs ? std::min(walk.chunkTokens, space.maxTokens)
                  : walk.chunkTokens;
    for (int64_t t0 = 0; t0 < n.T; t0 += chunkTokens) {
      int64_t t1 = std::min(n.T, t0 + chunkTokens);
      KernelTensors chunk = tokenRows(t, t0, t1);
      chunk.indices = inOutputs
                          ? sortedIndexRowsInto(args.indices, t0, t1, space)
                          : sortedIndexRows(args.indices, t0, t1);
      BwdSizes cn = n;
      cn.T = t1 - t0;
      library.launch(bwd, stream,
                     runtime::GridSizes{cn.T, n.S_kv, n.K, n.H, n.G},
                     kernelParams(chunk, cn, args.smScale, walk.period));
    }
  }

  return finish(t);
}

Outputs launchBwd(const at::Tensor &q, const at::Tensor &kv,
                  const at::Tensor &o, const at::Tensor &dout,
                  const at::Tensor &indices, const at::Tensor &lse,
                  double smScale, const std::optional<at::Tensor> &qPositions,
                  const std::optional<at::Tensor> &delta,
                  at::ScalarType dqDtype, at::ScalarType dkvDtype) {
  const BwdArgs args{q,          kv,    o,       dout,    indices, lse,
                     qPositions, delta, smScale, dqDtype, dkvDtype};
  const BwdSizes n = launchSizes(args);
  const OpOptions options = opOptions();
  const c10::cuda::CUDAGuard guard(q.device());
  lastChoice() = Choice{};
  if (n.T == 0)
    return emptyProblem(args);
  // dkv is summed with fp32 atomic reductions, whose order changes from
  // run to run: under torch.use_deterministic_algorithms(True) the op
  // raises (warns with warn_only=True) through PyTorch's alert, as ATen's
  // order-dependent atomics do, instead of passing as deterministic.
  at::globalContext().alertNotDeterministic("smla.sparse_mla_bwd");
  try {
    const bool hasPositions = qPositions.has_value() && qPositions->defined();
    const BwdConfig config{n, hasPositions, dqDtype, dkvDtype};
    return launchKernels(args, n, config, selectBwd(config), options);
  } catch (const runtime::Error &error) {
    TORCH_CHECK(false, error.what());
  }
}

} // namespace
} // namespace smla::ext

TORCH_LIBRARY_IMPL(smla, CUDA, m) {
  m.impl("_launch_bwd", &smla::ext::launchBwd);
}
