//===- TopkLength.cpp - Slots per token (topk_length) ---------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "TopkLength.h"

#include <ATen/ATen.h>

namespace smla::ext {
namespace {

/// min(K, max(0, lengths)) as int64 [T, 1, 1].
at::Tensor slotsOf(const at::Tensor &lengths, int64_t K) {
  return lengths.to(at::kLong).clamp(0, K).view({-1, 1, 1});
}

} // namespace

at::Tensor slotsPastLengthsSet(const at::Tensor &indices,
                               const at::Tensor &lengths, int32_t value) {
  const int64_t K = indices.size(2);
  at::Tensor slot = at::arange(K, indices.options().dtype(at::kLong));
  return indices.masked_fill(slot.view({1, 1, K}) >= slotsOf(lengths, K),
                             value);
}

at::Tensor slotsPastLengths(const at::Tensor &lengths, int64_t K, int64_t G) {
  return slotsOf(lengths, K).neg().add(K).sum().mul(G);
}

} // namespace smla::ext
