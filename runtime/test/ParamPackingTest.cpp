//===- ParamPackingTest.cpp - Tests for kernel parameter buffers ----------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Error.h"
#include "smla/runtime/Launcher.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace smla::runtime;
using namespace smla::runtime::test;

namespace {

Manifest withParams(const std::string &params) {
  KernelJson kernel;
  kernel.params = params;
  return Manifest::parse(manifestText({kernel}));
}

template <typename T> T at(const PackedParams &packed, size_t offset) {
  T value;
  std::memcpy(&value, packed.bytes() + offset, sizeof(T));
  return value;
}

TEST(ParamPacking, AlignsEachParameterToItsSize) {
  Manifest manifest = withParams(
      R"([{"name": "T", "type": "i32"}, {"name": "q", "type": "ptr"},)"
      R"( {"name": "scale", "type": "f32"}, {"name": "H", "type": "i32"},)"
      R"( {"name": "n", "type": "i64"}, {"name": "last", "type": "i32"}])");
  ParamValues values{{"T", ParamValue::i32(-7)},
                     {"q", ParamValue::ptr(CUdeviceptr(0x7f0012345678))},
                     {"scale", ParamValue::f32(0.125f)},
                     {"H", ParamValue::i32(16)},
                     {"n", ParamValue::i64(INT64_C(1) << 40)},
                     {"last", ParamValue::i32(3)},
                     {"unused", ParamValue::f32(1.0f)}};
  PackedParams packed = packParams(manifest.kernels[0], values);
  // i32 @0, pad to 8, ptr @8, f32 @16, i32 @20, i64 @24, i32 @32.
  EXPECT_EQ(packed.offsets(), (std::vector<size_t>{0, 8, 16, 20, 24, 32}));
  EXPECT_EQ(packed.size(), 36u);
  EXPECT_EQ(at<int32_t>(packed, 0), -7);
  EXPECT_EQ(at<uint64_t>(packed, 8), 0x7f0012345678u);
  EXPECT_EQ(at<float>(packed, 16), 0.125f);
  EXPECT_EQ(at<int32_t>(packed, 20), 16);
  EXPECT_EQ(at<int64_t>(packed, 24), INT64_C(1) << 40);
  EXPECT_EQ(at<int32_t>(packed, 32), 3);
  // The pointer array points at those slots, in parameter order.
  void **pointers = packed.kernelParams();
  for (size_t i = 0; i < 6; ++i)
    EXPECT_EQ(pointers[i], packed.bytes() + packed.offsets()[i]) << i;
  EXPECT_EQ(*static_cast<int32_t *>(pointers[3]), 16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pointers[1]) % 8, 0u);
}

TEST(ParamPacking, ConvertsIntegersThatFit) {
  Manifest manifest = withParams(
      R"([{"name": "a", "type": "i32"}, {"name": "b", "type": "i64"}])");
  PackedParams packed =
      packParams(manifest.kernels[0], {{"a", ParamValue::i64(-2147483648LL)},
                                       {"b", ParamValue::i32(-1)}});
  EXPECT_EQ(at<int32_t>(packed, 0), INT32_MIN);
  EXPECT_EQ(at<int64_t>(packed, 8), -1); // sign-extended
}

TEST(ParamPacking, PointerFromHostAddressKeepsTheBits) {
  int dummy = 0;
  EXPECT_EQ(ParamValue::ptr(&dummy).bits(),
            static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&dummy)));
  EXPECT_EQ(ParamValue::ptr(nullptr).bits(), 0u);
  EXPECT_EQ(ParamValue::ptr(&dummy).type(), ParamType::Ptr);
}

TEST(ParamPacking, MissingValueNamesTheParameterAndKernel) {
  Manifest manifest = withParams(
      R"([{"name": "q", "type": "ptr"}, {"name": "sm_scale", "type": "f32"}])");
  const KernelEntry &kernel = manifest.kernels[0];
  EXPECT_EQ(SMLA_ERROR_MESSAGE(
                packParams(kernel, {{"q", ParamValue::ptr(CUdeviceptr(16))},
                                    {"sm_scal", ParamValue::f32(1.0f)}})),
            "smla: no value given for parameter 'sm_scale' (f32) of " +
                kernel.describe());
}

TEST(ParamPacking, MistypedAndOutOfRangeValuesAreErrors) {
  Manifest manifest = withParams(
      R"([{"name": "q", "type": "ptr"}, {"name": "T", "type": "i32"},)"
      R"( {"name": "s", "type": "f32"}])");
  const KernelEntry &kernel = manifest.kernels[0];
  ParamValues good{{"q", ParamValue::ptr(CUdeviceptr(16))},
                   {"T", ParamValue::i32(1)},
                   {"s", ParamValue::f32(1.0f)}};
  EXPECT_NO_THROW(packParams(kernel, good));

  ParamValues values = good;
  values.at("q") = ParamValue::i64(16);
  EXPECT_EQ(SMLA_ERROR_MESSAGE(packParams(kernel, values)),
            "smla: a value of type i64 was given for parameter 'q' (ptr) of " +
                kernel.describe());
  values = good;
  values.at("s") = ParamValue::i32(1);
  EXPECT_EQ(SMLA_ERROR_MESSAGE(packParams(kernel, values)),
            "smla: a value of type i32 was given for parameter 's' (f32) of " +
                kernel.describe());
  values = good;
  values.at("T") = ParamValue::f32(1.0f);
  EXPECT_EQ(SMLA_ERROR_MESSAGE(packParams(kernel, values)),
            "smla: a value of type f32 was given for parameter 'T' (i32) of " +
                kernel.describe());
  values = good;
  values.at("T") = ParamValue::i64(INT64_C(1) << 31);
  EXPECT_EQ(SMLA_ERROR_MESSAGE(packParams(kernel, values)),
            "smla: the value 2147483648 for parameter 'T' (i32) of " +
                kernel.describe() + " does not fit in 32 bits");
}

TEST(ParamPacking, EmptyParameterList) {
  Manifest manifest = withParams("[]");
  PackedParams packed = packParams(manifest.kernels[0], {});
  EXPECT_EQ(packed.size(), 0u);
  EXPECT_TRUE(packed.offsets().empty());
}

} // namespace
