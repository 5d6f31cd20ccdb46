//===- SlotWalk.h - The order the bwd kernel walks its slots -*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// dq and dkv do not depend on the order in which a CTA visits its row's
// top-k slots (every slot is masked on its own, and the fp32 sums are
// reductions in any order), so the op may hand the kernel each row of
// indices sorted. Together with the kernel's rotated block walk
// (walk_period, lib/Conversion/SMLAToNVVM/BlockWalk.cpp) that makes the
// CTAs resident at one moment reduce into one narrow band of dKV rows:
// when the rows they would touch otherwise do not fit in L2 (random
// indices over a large S_kv: B2r), the reductions stay in L2 instead of
// going to DRAM (docs/runtime.md, "The slot walk").
//
// "Sorted" costs a sort of the indices, a workspace for the sorted rows
// and launches in chunks, so it is chosen per call: only when the fp32 dKV
// rows would not fit in L2, and the distinct rows that one wave of
// resident CTAs reduces into do not either (counted on a window of the
// call's own indices on the device; a call uses the newest count that has
// arrived, and waits only for the first of a key: device, K, G, H and
// D + Dt, not T or S_kv, which change every micro-batch in packed training;
// walk=given or sorted skips the count). Rows are sorted and launched in chunks of
// tokens (kSortWorkspaceBytes); the sort writes into the outputs' memory
// where they hold it (SortSpace: no workspace), else into a workspace of
// that bound.
//
// Settings (WalkOptions, Options.h; smla.config, tuning and tests):
// walk = auto|sorted|given (SMLA_WALK), walk_period (0: no rotation; where
// the sorted walk runs, and for the given order under walk=given),
// walk_chunk_tokens (only where the sorted walk runs), walk_l2_bytes (the
// L2 size the auto choice assumes).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_SLOTWALK_H
#define SMLA_PYTHON_SLOTWALK_H

#include "LaunchArgs.h"
#include "Options.h"

#include "smla/runtime/Manifest.h"

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace smla::ext {

/// The bytes the sorted-index chunks (int32 values plus at::sort's int64
/// permutation) aim at: a chunk holds this many bytes of rows, whole waves
/// of tokens where that allows, and at least one token (whose rows may
/// exceed it); SMLA_WALK_CHUNK_TOKENS overrides. torch.sort's own scratch
/// comes on top.
inline constexpr int64_t kSortWorkspaceBytes = int64_t(64) << 20;

struct SlotWalk {
  /// Launch on row-sorted copies of the indices, chunkTokens rows at a time.
  bool sorted = false;
  int64_t chunkTokens = 0;
  /// The bwd kernel's walk_period parameter (0: blocks in order).
  int32_t period = 0;
};

/// Whether `stream` is capturing a CUDA graph (nothing may synchronize).
bool isCapturing(cudaStream_t stream);

/// How the bwd kernel `bwd` walks the slots of this call.
SlotWalk chooseSlotWalk(const WalkOptions &env, const BwdArgs &args,
                        const BwdSizes &n, const runtime::KernelEntry &bwd);

/// indices[t0:t1] with each row sorted ascending (invalid indices, < 0 or
/// >= S_kv, sort to the ends and stay invalid).
at::Tensor sortedIndexRows(const at::Tensor &indices, int64_t t0, int64_t t1);

/// The bytes of one token's row of the contiguous per-token output `dq`
/// ([T, ...]); 0 where dq is undefined, not contiguous or empty. The
/// sorted walk's permutation and the token pairs' index rows live there.
int64_t tokenRowBytes(const at::Tensor &dq);

/// The outputs' memory that the sorted walk sorts into, so that it takes
/// no workspace (the bound: the fp32 dKV buffer + O(T H) beyond
/// the outputs). A chunk's sorted rows go to the start of dkv (the bf16
/// output, written only by the cast after every bwd launch; a chunk's
/// sort follows the previous chunk's launch on the stream), torch.sort's
/// permutation to the chunk's own tokens' dq rows (dead before the chunk's
/// launch, which then writes dq there). Empty when the outputs cannot hold
/// them: dkv is the fp32 accumulator itself, or a token's dq row is
/// shorter than its G K int64 (or sizes do not divide).
struct SortSpace {
  at::Tensor values; // dkv as int32, flat
  at::Tensor order;  // dq as int64, flat
  int64_t orderPerToken = 0;
  /// The most tokens whose sorted rows fit the values.
  int64_t maxTokens = 0;
  bool usable() const { return maxTokens > 0; }
};
SortSpace sortSpace(const at::Tensor &dq, const at::Tensor &dkv,
                    const BwdSizes &n);

/// sortedIndexRows into `space` (tokens t0..t1 within space.maxTokens of
/// each other): the sorted rows, a view of dkv's memory.
at::Tensor sortedIndexRowsInto(const at::Tensor &indices, int64_t t0,
                               int64_t t1, const SortSpace &space);

} // namespace smla::ext

#endif // SMLA_PYTHON_SLOTWALK_H
