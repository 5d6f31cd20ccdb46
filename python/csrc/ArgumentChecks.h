//===- ArgumentChecks.h - Validating sparse_mla_bwd's arguments -*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// The C++ op re-checks every argument (the Python API checks them first, but
// torch.ops.smla.sparse_mla_bwd can be called directly). Each failure is a
// c10::Error (RuntimeError in Python) that names the argument, what was
// expected and what was given, e.g.
//   smla.sparse_mla_bwd: argument 'indices' must be int32, got int64
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_ARGUMENTCHECKS_H
#define SMLA_PYTHON_ARGUMENTCHECKS_H

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace smla::ext {

/// The prefix of every message the op raises.
inline constexpr const char *kOpName = "smla.sparse_mla_bwd";

/// The op's arguments, by the names of its schema.
struct BwdArgs {
  const at::Tensor &q, &kv, &o, &dout, &indices, &lse;
  const std::optional<at::Tensor> &qPositions, &delta;
  double smScale;
  at::ScalarType dqDtype, dkvDtype;
};

/// The problem sizes, read from the shapes (see docs/contract.md).
struct BwdSizes {
  int64_t T = 0, H = 0, G = 0, K = 0, S_kv = 0, D = 0, Dt = 0;
};

/// Checks ranks, dtypes, devices, contiguity, matching sizes and scalars, in
/// that order, and returns the sizes. With `requireCuda`, q must also be a
/// CUDA tensor (checked last, so CPU tensors exercise every other check).
/// T = 0 is allowed (there is nothing to compute); K and S_kv must be at
/// least 1, as the Python API requires (smla/checks.py, same messages).
BwdSizes checkBwdArgs(const BwdArgs &args, bool requireCuda);

/// The largest sm_scale whose float32 product with log2(e) is finite
/// (smla/contract.py, SM_SCALE_MAX).
inline constexpr double kSmScaleMax = 2.3586574359122396e38;

/// True when `smScale` survives the kernels' float32 arithmetic: finite,
/// positive, normal as a float32, and sm_scale * log2(e) finite in float32
/// (smla/contract.py, sm_scale_fits_float32).
bool smScaleFitsFloat32(double smScale);

/// "bfloat16", "float32", "int32", ...: torch's names without "torch.".
const char *dtypeName(at::ScalarType type);

} // namespace smla::ext

#endif // SMLA_PYTHON_ARGUMENTCHECKS_H
