//===- ArgumentChecks.cpp - Validating sparse_mla_bwd's arguments ---------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "ArgumentChecks.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
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

// Numbers, shapes and devices are formatted here, and messages stream only
// strings: on the H200 image (torch 2.11) streaming an int64 into the
// message's ostringstream from this module crashed (SIGSEGV in
// basic_ostream::_M_insert<long>), while strings were fine.
std::string num(int64_t v) { return std::to_string(v); }

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string shapeOf(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i)
    out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

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
              "' must have ", num(a.rank), " dimension",
              a.rank == 1 ? " " : "s ", a.layout, ", got ", num(t.dim()),
              " (shape ", shapeOf(t.sizes()), ")");
}

void checkShape(const Arg &a, at::IntArrayRef expected, const char *why) {
  TORCH_CHECK(a.tensor->sizes() == expected, kOpName, ": argument '", a.name,
              "' must have shape ", shapeOf(expected), " ", why, ", got ",
              shapeOf(a.tensor->sizes()));
}

void checkOutDtype(const char *name, at::ScalarType type) {
  TORCH_CHECK(type == at::kBFloat16 || type == at::kFloat, kOpName,
              ": argument '", name, "' must be bfloat16 or float32, got ",
              dtypeName(type));
}

} // namespace

bool smScaleFitsFloat32(double smScale) {
  // Range first: converting an out-of-range double to float is undefined.
  if (!(std::isfinite(smScale) && smScale > 0 &&
        smScale <= std::numeric_limits<float>::max()))
    return false;
  const float scale = static_cast<float>(smScale);
  const float log2e = 1.4426950408889634f;
  return scale >= std::numeric_limits<float>::min() &&
         std::isfinite(scale * log2e);
}

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
                "' must be on the device of 'q' (", device.str(), "), got ",
                a->tensor->device().str());
  for (const Arg *a : present)
    TORCH_CHECK(a->tensor->is_contiguous(), kOpName, ": argument '", a->name,
                "' must be contiguous (row-major), got strides ",
                shapeOf(a->tensor->strides()), " for shape ",
                shapeOf(a->tensor->sizes()));

  // The kernels read q, kv, o and dout with 16-byte vector loads and
  // cp.async; a contiguous view at an odd offset would fault on the GPU.
  // (Not for meta/fake tensors, which have no data.)
  for (const Arg *a : {&q, &kv, &o, &dout})
    TORCH_CHECK(!requireCuda ||
                    reinterpret_cast<uintptr_t>(a->tensor->data_ptr()) % 16 ==
                        0,
                kOpName, ": argument '", a->name,
                "' must start at a 16-byte aligned address, got storage "
                "offset ",
                num(a->tensor->storage_offset()));

  BwdSizes n;
  n.T = args.q.size(0);
  n.H = args.q.size(1);
  const int64_t width = args.q.size(2);
  n.S_kv = args.kv.size(0);
  n.G = args.kv.size(1);
  TORCH_CHECK(n.H >= 1, kOpName, ": argument 'q' must have at least one head ",
              "(q.shape[1] >= 1), got shape ", shapeOf(args.q.sizes()));
  TORCH_CHECK(n.S_kv >= 1, kOpName, ": argument 'kv' must have S_kv = ",
              "kv.shape[0] >= 1, got ", num(n.S_kv));
  TORCH_CHECK(n.G >= 1, kOpName, ": argument 'kv' must have at least one ",
              "group (kv.shape[1] >= 1), got shape ", shapeOf(args.kv.sizes()));
  TORCH_CHECK(args.kv.size(2) == width, kOpName, ": argument 'kv' must have ",
              "last dimension D+Dt = ", num(width), " (q.shape[2]), got ",
              num(args.kv.size(2)));
  TORCH_CHECK(n.H % n.G == 0, kOpName, ": argument 'q' has H=", num(n.H),
              " heads (q.shape[1]), which must be a multiple of the number of ",
              "kv groups G=", num(n.G), " (kv.shape[1])");
  TORCH_CHECK(args.o.size(0) == n.T && args.o.size(1) == n.H, kOpName,
              ": argument 'o' must have shape [T, H, D] with T=", num(n.T),
              ", H=", num(n.H), " (from 'q'), got ", shapeOf(args.o.sizes()));
  n.D = args.o.size(2);
  n.Dt = width - n.D;
  TORCH_CHECK(n.D >= 1 && n.Dt >= 0, kOpName, ": argument 'o' must have last ",
              "dimension D between 1 and D+Dt=", num(width),
              " (q.shape[2]), got ", num(n.D));
  checkShape(dout, args.o.sizes(), "(the shape of 'o')");
  TORCH_CHECK(args.indices.size(0) == n.T && args.indices.size(1) == n.G,
              kOpName, ": argument 'indices' must have shape [T, G, K] with T=",
              num(n.T), " (from 'q') and G=", num(n.G), " (from 'kv'), got ",
              shapeOf(args.indices.sizes()));
  n.K = args.indices.size(2);
  TORCH_CHECK(n.K >= 1, kOpName, ": argument 'indices' must have topk = ",
              "indices.shape[2] >= 1, got ", num(n.K));
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
                num(kMax), ", got ", num(value));

  TORCH_CHECK(smScaleFitsFloat32(args.smScale), kOpName,
              ": argument 'sm_scale' must be a finite positive number that "
              "is normal in float32 (the kernels' type) and keeps sm_scale * "
              "log2(e) finite in float32 (",
              num(static_cast<double>(std::numeric_limits<float>::min())),
              " <= sm_scale <= ", num(kSmScaleMax), "), got ",
              num(args.smScale));
  checkOutDtype("dq_dtype", args.dqDtype);
  checkOutDtype("dkv_dtype", args.dkvDtype);

  if (requireCuda)
    TORCH_CHECK(device.is_cuda(), kOpName,
                ": argument 'q' must be a CUDA tensor, got device ",
                device.str());
  return n;
}

} // namespace smla::ext
