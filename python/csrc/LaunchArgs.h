//===- LaunchArgs.h - The launch op's arguments and their layout -*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// smla::_launch_bwd is the private op that torch.ops.smla.sparse_mla_bwd
// (smla/_op.py) runs after checking its arguments by smla's one set of
// rules (smla/checks.py) and laying them out as the kernels read them:
// contiguous, 16-byte aligned, lse in base 2, heads padded to the kernel's.
// The launch op does not check arguments again; launchSizes only refuses
// tensors whose layout would make the kernels read or write outside them,
// so that a direct call of the private op cannot.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_LAUNCHARGS_H
#define SMLA_PYTHON_LAUNCHARGS_H

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace smla::ext {

/// The prefix of every message the op raises.
inline constexpr const char *kOpName = "smla.sparse_mla_bwd";

/// The launch op's arguments, by the names of its schema; `lse` is base 2.
struct BwdArgs {
  const at::Tensor &q, &kv, &o, &dout, &indices, &lse;
  const std::optional<at::Tensor> &qPositions, &delta;
  double smScale;
  at::ScalarType dqDtype, dkvDtype;
  /// Slots per token ([T] int32; docs/contract.md): token t has the first
  /// min(K, max(0, topk_length[t])) slots of its index rows.
  const std::optional<at::Tensor> &topkLength;
};

/// The problem sizes, read from the shapes (see docs/contract.md).
struct BwdSizes {
  int64_t T = 0, H = 0, G = 0, K = 0, S_kv = 0, D = 0, Dt = 0;
};

/// The sizes of `args`, after checking that every tensor has the shape,
/// dtype, device and contiguous, aligned layout the kernels read and
/// write; the error says which does not and points at the public op.
BwdSizes launchSizes(const BwdArgs &args);

} // namespace smla::ext

#endif // SMLA_PYTHON_LAUNCHARGS_H
