//===- ParamPacking.cpp - Kernel parameter buffers and launch grids -------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Pure functions of the manifest and the caller's values, kept apart from
// the driver so they are testable (and fail) before any CUDA call.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Error.h"
#include "smla/runtime/Launcher.h"

#include <cstring>
#include <limits>

namespace smla::runtime {

ParamValue ParamValue::ptr(CUdeviceptr address) {
  ParamValue value;
  value.type_ = ParamType::Ptr;
  value.bits_ = static_cast<uint64_t>(address);
  return value;
}

ParamValue ParamValue::ptr(const void *address) {
  return ptr(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(address)));
}

ParamValue ParamValue::i32(int32_t v) {
  ParamValue value;
  value.type_ = ParamType::I32;
  value.bits_ = static_cast<uint32_t>(v);
  return value;
}

ParamValue ParamValue::i64(int64_t v) {
  ParamValue value;
  value.type_ = ParamType::I64;
  value.bits_ = static_cast<uint64_t>(v);
  return value;
}

ParamValue ParamValue::f32(float v) {
  ParamValue value;
  value.type_ = ParamType::F32;
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  value.bits_ = bits;
  return value;
}

void **PackedParams::kernelParams() {
  pointers_.resize(offsets_.size());
  auto *base = reinterpret_cast<uint8_t *>(storage_.data());
  for (size_t i = 0; i < offsets_.size(); ++i)
    pointers_[i] = base + offsets_[i];
  return pointers_.data();
}

/// The value's signed integer, for i32/i64 values.
static int64_t integerOf(const ParamValue &value) {
  if (value.type() == ParamType::I32)
    return static_cast<int32_t>(static_cast<uint32_t>(value.bits()));
  return static_cast<int64_t>(value.bits());
}

PackedParams packParams(const KernelEntry &kernel, const ParamValues &values) {
  PackedParams packed;
  size_t offset = 0;
  for (const ParamSpec &param : kernel.params) {
    size_t size = paramTypeSize(param.type);
    offset = (offset + size - 1) / size * size;
    packed.offsets_.push_back(offset);
    offset += size;
  }
  packed.size_ = offset;
  packed.storage_.assign((offset + 7) / 8, 0);
  auto *base = reinterpret_cast<uint8_t *>(packed.storage_.data());

  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const ParamSpec &param = kernel.params[i];
    // Built only for an error: describe() formats the whole config, which
    // cost ~1 us per parameter on every launch.
    auto subject = [&] {
      return "parameter '" + param.name + "' (" + paramTypeName(param.type) +
             ") of " + kernel.describe();
    };
    auto found = values.find(param.name);
    if (found == values.end())
      throw Error("smla: no value given for " + subject());
    const ParamValue &value = found->second;
    bool isInt =
        value.type() == ParamType::I32 || value.type() == ParamType::I64;
    uint8_t *slot = base + packed.offsets_[i];
    if (param.type == ParamType::I32 && isInt) {
      int64_t v = integerOf(value);
      if (v < std::numeric_limits<int32_t>::min() ||
          v > std::numeric_limits<int32_t>::max())
        throw Error("smla: the value " + std::to_string(v) + " for " +
                    subject() + " does not fit in 32 bits");
      int32_t narrow = static_cast<int32_t>(v);
      std::memcpy(slot, &narrow, 4);
    } else if (param.type == ParamType::I64 && isInt) {
      int64_t v = integerOf(value);
      std::memcpy(slot, &v, 8);
    } else if (param.type == value.type()) {
      // ptr or f32: copy the value's own bytes.
      if (param.type == ParamType::F32) {
        uint32_t bits = static_cast<uint32_t>(value.bits());
        std::memcpy(slot, &bits, 4);
      } else {
        uint64_t bits = value.bits();
        std::memcpy(slot, &bits, 8);
      }
    } else {
      throw Error(std::string("smla: a value of type ") +
                  paramTypeName(value.type()) + " was given for " + subject());
    }
  }
  return packed;
}

LaunchGeometry launchGeometry(const KernelEntry &kernel,
                              const GridSizes &sizes) {
  // Hardware limits for compute capability 3.0 and newer.
  static constexpr int64_t kMaxGrid[3] = {std::numeric_limits<int32_t>::max(),
                                          65535, 65535};
  static const char *const kAxis[3] = {"x", "y", "z"};
  LaunchGeometry geometry;
  geometry.block = kernel.launch.block;
  geometry.dynamicSmem = kernel.launch.dynamicSmem;
  for (int i = 0; i < 3; ++i) {
    const GridExpr &rule = kernel.launch.grid[i];
    int64_t value;
    try {
      value = rule.evaluate(sizes);
    } catch (const Error &error) {
      // Re-issue with the kernel named; the message already starts "smla: ".
      throw Error("smla: cannot launch " + kernel.describe() + ": " +
                  (error.what() + 6));
    }
    if (value > kMaxGrid[i])
      throw Error("smla: cannot launch " + kernel.describe() + ": grid." +
                  kAxis[i] + " = " + rule.str() + " = " +
                  std::to_string(value) + " exceeds the limit " +
                  std::to_string(kMaxGrid[i]));
    geometry.grid[i] = static_cast<unsigned>(value);
  }
  return geometry;
}

} // namespace smla::runtime
