//===- LaunchArgs.cpp - The launch op's arguments and their layout --------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "LaunchArgs.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <limits>
#include <string>

namespace smla::ext {
namespace {

// Shapes are formatted here and messages stream only strings: on the H200
// image (torch 2.11) streaming an int64 into a message's ostringstream
// from this module crashed, while strings were fine.
std::string shapeOf(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i)
    out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

} // namespace

BwdSizes launchSizes(const BwdArgs &args) {
  for (const at::Tensor *t : {&args.q, &args.kv, &args.o, &args.indices})
    TORCH_CHECK(t->defined() && t->dim() == 3, kOpName,
                ": smla::_launch_bwd takes 3-dimensional q, kv, o and indices; "
                "call torch.ops.smla.sparse_mla_bwd, which checks its arguments");
  BwdSizes n;
  n.T = args.q.size(0);
  n.H = args.q.size(1);
  n.S_kv = args.kv.size(0);
  n.G = args.kv.size(1);
  n.D = args.o.size(2);
  n.Dt = args.q.size(2) - n.D;
  n.K = args.indices.size(2);
  const int64_t width = n.D + n.Dt;
  const at::Device device = args.q.device();
  auto expect = [&](const char *name, const at::Tensor *t,
                    at::IntArrayRef shape, at::ScalarType type) {
    if (t == nullptr)
      return;
    const bool fits =
        t->defined() && t->sizes() == shape && t->scalar_type() == type &&
        t->device() == device && t->is_contiguous() &&
        reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0;
    TORCH_CHECK(fits, kOpName, ": smla::_launch_bwd: '", name,
                "' is not the contiguous, 16-byte aligned ", shapeOf(shape),
                " tensor of its type on q's device that the kernels read (got ",
                t->defined() ? shapeOf(t->sizes()) : std::string("undefined"),
                "); call torch.ops.smla.sparse_mla_bwd, which checks and lays "
                "out its arguments");
  };
  const auto optional = [](const std::optional<at::Tensor> &t) {
    return t.has_value() && t->defined() ? &*t : nullptr;
  };
  expect("q", &args.q, {n.T, n.H, width}, at::kBFloat16);
  expect("kv", &args.kv, {n.S_kv, n.G, width}, at::kBFloat16);
  expect("o", &args.o, {n.T, n.H, n.D}, at::kBFloat16);
  expect("do", &args.dout, {n.T, n.H, n.D}, at::kBFloat16);
  expect("indices", &args.indices, {n.T, n.G, n.K}, at::kInt);
  expect("lse", &args.lse, {n.T, n.H}, at::kFloat);
  expect("q_positions", optional(args.qPositions), {n.T}, at::kInt);
  expect("delta", optional(args.delta), {n.T, n.H}, at::kFloat);
  expect("topk_length", optional(args.topkLength), {n.T}, at::kInt);
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  TORCH_CHECK(n.H >= 1 && n.G >= 1 && n.H % n.G == 0 && n.D >= 1 &&
                  n.Dt >= 0 && n.K >= 1 && n.S_kv >= 1 && n.T <= kMax &&
                  n.S_kv <= kMax && n.K <= kMax,
              kOpName, ": smla::_launch_bwd: sizes outside what the kernels "
              "take; call torch.ops.smla.sparse_mla_bwd, which checks them");
  TORCH_CHECK(device.is_cuda(), kOpName,
              ": smla::_launch_bwd runs on CUDA tensors only");
  TORCH_CHECK((args.dqDtype == at::kBFloat16 || args.dqDtype == at::kFloat) &&
                  (args.dkvDtype == at::kBFloat16 || args.dkvDtype == at::kFloat),
              kOpName, ": smla::_launch_bwd: dq and dkv are bfloat16 or float32");
  return n;
}

} // namespace smla::ext
