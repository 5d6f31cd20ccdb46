//===- TopkLength.h - Slots per token (topk_length) -------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// A call may give each token its number of slots (`topk_length`, [T]
// int32, as DeepSeek-V4's trainers do): token t has the first
// n_t = min(K, max(0, topk_length[t])) slots of its index rows, and a slot
// past n_t is not a slot: never read, contributing nothing, not counted as
// invalid (docs/contract.md). A bwd kernel with a `topk_length` parameter
// (the warp-specialized ones) walks only the blocks below n_t. Every other
// kernel (and the token pairs, which build their rows from whole index
// rows) runs on a copy of the indices whose slots past n_t hold -1: those
// slots are then walked as invalid, and the invalid-slot counter takes
// them off again (slotsPastLengths). The sorted walk on a kernel that takes
// the lengths sorts a copy whose slots past n_t hold INT32_MAX (invalid,
// and last in ascending order): each row's first n_t sorted slots are then
// its own slots, and the kernel keeps its lengths.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_TOPKLENGTH_H
#define SMLA_PYTHON_TOPKLENGTH_H

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace smla::ext {

/// A copy of `indices` ([T, G, K] int32) with slot j of token t set to
/// `value` (an invalid index: -1, or INT32_MAX to sort last) where
/// j >= min(K, max(0, lengths[t])) (`lengths` [T] int32).
at::Tensor slotsPastLengthsSet(const at::Tensor &indices,
                               const at::Tensor &lengths, int32_t value);

/// The slots of a [T, G, K] index tensor at or past each token's length,
/// G * sum_t (K - min(K, max(0, lengths[t]))): what a kernel walking
/// slotsPastLengthsInvalid's copy counts as invalid beyond the contract's
/// count. An int64 scalar on the device.
at::Tensor slotsPastLengths(const at::Tensor &lengths, int64_t K, int64_t G);

} // namespace smla::ext

#endif // SMLA_PYTHON_TOPKLENGTH_H
