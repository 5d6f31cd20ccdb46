//===- ArgumentChecks.cpp - Validating sparse_mla_bwd's arguments ---------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "ArgumentChecks.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace smla::ext {

const char *dtypeName(at::ScalarType type) {
  switch (type) {
  case at::kBFloat16:
    return "bfloat16";
  case at::kHalf:
    return "float16";
  case at::kFloat:
    return "float32";
  case at::kDouble:
    return "float64";
  case at::kInt:
    return "int32";
  case at::kLong:
    return "int64";
  case at::kShort:
    return "int16";
  case at::kByte:
    return "uint8";
  case at::kChar:
    return "int8";
  case at::kBool:
    return "bool";
  default:
    return c10::toString(type);
  }
}

namespace {

/// One tensor argument and what its layout is called in messages.
struct Arg {
  const char *name;
  const at::Tensor *tensor; // nullptr: an absent optional argument
  int64_t rank;
  const char *layout;
  at::ScalarType dtype;
};

void checkRank(const Arg &a) {
  const at::Tensor &t = *a.tensor;
  TORCH_CHECK(t.defined(), kOpName, ": argument '", a.name,
              "' must be a tensor ", a.layout, ", got an undefined tensor");
  TORCH_CHECK(t.dim() == a.rank, kOpName, ": argument '", a.name,
              "' must have ", a.rank, " dimension", a.rank == 1 ? " " : "s ",
              a.layout, ", got ", t.dim(), " (shape ", t.sizes(), ")");
}

void checkShape(const Arg &a, at::IntArrayRef expected, const char *why) {
  TORCH_CHECK(a.tensor->sizes() == expected, kOpName, ": argument '", a.name,
              "' must have shape ", expected, " ", why, ", got ",
              a.tensor->sizes());
}

void checkOutDtype(const char *name, at::ScalarType type) {
  TORCH_CHECK(type == at::kBFloat16 || type == at::kFloat, kOpName,
              ": argument '", name, "' must be bfloat16 or float32, got ",
              dtypeName(type));
}

} // namespace

BwdSizes checkBwdArgs(const BwdArgs &args, bool requireCuda) {
  const auto optional = [](const std::optional<at::Tensor> &t) {
    return t.has_value() && t->defined() ? &*t : nullptr;
  };
  const Arg q{"q", &args.q, 3, "[T, H, D+Dt]", at::kBFloat16};
  const Arg kv{"kv", &args.kv, 3, "[S_kv, G, D+Dt]", at::kBFloat16};
  const Arg o{"o", &args.o, 3, "[T, H, D]", at::kBFloat16};
  const Arg dout{"dout", &args.dout, 3, "[T, H, D]", at::kBFloat16};
  const Arg indices{"indices", &args.indices, 3, "[T, G, K]", at::kInt};
  const Arg lse{"lse", &args.lse, 2, "[T, H]", at::kFloat};
  const Arg positions{"q_positions", optional(args.qPositions), 1, "[T]",
                      at::kInt};
  const Arg delta{"delta", optional(args.delta), 2, "[T, H]", at::kFloat};

  std::vector<const Arg *> present{&q, &kv, &o, &dout, &indices, &lse};
  for (const Arg *a : {&positions, &delta})
    if (a->tensor)
      present.push_back(a);

  for (const Arg *a : present)
    checkRank(*a);
  for (const Arg *a : present)
    TORCH_CHECK(a->tensor->scalar_type() == a->dtype, kOpName, ": argument '",
                a->name, "' must be ", dtypeName(a->dtype), ", got ",
                dtypeName(a->tensor->scalar_type()));
  const at::Device device = args.q.device();
  for (const Arg *a : present)
    TORCH_CHECK(a->tensor->device() == device, kOpName, ": argument '", a->name,
                "' must be on the device of 'q' (", device, "), got ",
                a->tensor->device());
  for (const Arg *a : present)
    TORCH_CHECK(a->tensor->is_contiguous(), kOpName, ": argument '", a->name,
                "' must be contiguous (row-major), got strides ",
                a->tensor->strides(), " for shape ", a->tensor->sizes());

  BwdSizes n;
  n.T = args.q.size(0);
  n.H = args.q.size(1);
  const int64_t width = args.q.size(2);
  n.S_kv = args.kv.size(0);
  n.G = args.kv.size(1);
  TORCH_CHECK(n.H >= 1, kOpName, ": argument 'q' must have at least one head ",
              "(q.shape[1] >= 1), got shape ", args.q.sizes());
  TORCH_CHECK(n.G >= 1, kOpName, ": argument 'kv' must have at least one ",
              "group (kv.shape[1] >= 1), got shape ", args.kv.sizes());
  TORCH_CHECK(args.kv.size(2) == width, kOpName, ": argument 'kv' must have ",
              "last dimension D+Dt = ", width, " (q.shape[2]), got ",
              args.kv.size(2));
  TORCH_CHECK(n.H % n.G == 0, kOpName, ": argument 'q' has H=", n.H,
              " heads (q.shape[1]), which must be a multiple of the number of ",
              "kv groups G=", n.G, " (kv.shape[1])");
  TORCH_CHECK(args.o.size(0) == n.T && args.o.size(1) == n.H, kOpName,
              ": argument 'o' must have shape [T, H, D] with T=", n.T,
              ", H=", n.H, " (from 'q'), got ", args.o.sizes());
  n.D = args.o.size(2);
  n.Dt = width - n.D;
  TORCH_CHECK(n.D >= 1 && n.Dt >= 0, kOpName, ": argument 'o' must have last ",
              "dimension D between 1 and D+Dt=", width, " (q.shape[2]), got ",
              n.D);
  checkShape(dout, args.o.sizes(), "(the shape of 'o')");
  TORCH_CHECK(
      args.indices.size(0) == n.T && args.indices.size(1) == n.G, kOpName,
      ": argument 'indices' must have shape [T, G, K] with T=", n.T,
      " (from 'q') and G=", n.G, " (from 'kv'), got ", args.indices.sizes());
  n.K = args.indices.size(2);
  checkShape(lse, {n.T, n.H}, "[T, H]");
  if (positions.tensor)
    checkShape(positions, {n.T}, "[T]");
  if (delta.tensor)
    checkShape(delta, {n.T, n.H}, "[T, H]");

  // The kernels take the sizes as 32-bit integers.
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (const auto &[name, value] :
       {std::pair<const char *, int64_t>{"T (q.shape[0])", n.T},
        {"S_kv (kv.shape[0])", n.S_kv},
        {"K (indices.shape[2])", n.K}})
    TORCH_CHECK(value <= kMax, kOpName, ": size ", name, " must be at most ",
                kMax, ", got ", value);

  TORCH_CHECK(std::isfinite(args.smScale) && args.smScale > 0, kOpName,
              ": argument 'sm_scale' must be a finite positive number, got ",
              args.smScale);
  checkOutDtype("dq_dtype", args.dqDtype);
  checkOutDtype("dkv_dtype", args.dkvDtype);

  if (requireCuda)
    TORCH_CHECK(device.is_cuda(), kOpName,
                ": argument 'q' must be a CUDA tensor, got device ", device);
  return n;
}

} // namespace smla::ext
