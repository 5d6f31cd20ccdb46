//===- KernelLibraryTest.cpp - Tests for loading and launching ------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Error.h"
#include "smla/runtime/Launcher.h"

#include "FakeDriver.h"
#include "TestSupport.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

using namespace smla::runtime;
using namespace smla::runtime::test;

namespace {

const char *const kName = "smla_bwd_d512_dt64_h16_g1_lse2_pos";
const std::string kDescribed =
    std::string("kernel '") + kName +
    "' (d=512 dt=64 h=16 g=1 lse_base=2 positions=1 block=64 dq_type=bf16 "
    "dkv_type=f32)";

/// The default bwd kernel plus a small-smem delta kernel sharing no cubin.
std::vector<KernelJson> twoKernels() {
  KernelJson delta;
  delta.name = "smla_delta";
  delta.kind = "\"delta\"";
  delta.entry = "\"smla_delta_kernel\"";
  delta.config = R"({"d": 512})";
  delta.launch =
      R"j({"block": [256, 1, 1], "grid": ["ceil_div(T, 4)", "H", 1],)j"
      R"( "dynamic_smem": 49152})"; // exactly 48 KiB: no opt-in
  return {KernelJson(), delta};
}

std::map<std::string, std::string>
cubinsFor(const std::vector<KernelJson> &kernels) {
  std::map<std::string, std::string> cubins;
  for (const KernelJson &kernel : kernels)
    cubins[kernel.name + ".cubin"] = fakeCubin(kernel.name);
  return cubins;
}

ParamValues bwdValues() {
  return {{"q", ParamValue::ptr(CUdeviceptr(0xabc000))},
          {"T", ParamValue::i64(100)},
          {"sm_scale", ParamValue::f32(0.5f)}};
}

GridSizes bwdSizes(int64_t T = 100) { return GridSizes{T, 4096, 2048, 16, 1}; }

class KernelLibraryTest : public ::testing::Test {
protected:
  FakeDriver fake;
  DriverApi api = fake.api();
  KernelLibrary library = KernelLibrary::fromMemory(
      manifestText(twoKernels()), cubinsFor(twoKernels()), &api);
  const KernelEntry &bwd = library.kernel(kName);
  const KernelEntry &delta = library.kernel("smla_delta");
};

TEST_F(KernelLibraryTest, LoadsLazilyAndLaunchesWithTheManifestLayout) {
  EXPECT_EQ(library.loadedModuleCount(), 0u); // nothing before first use
  EXPECT_TRUE(fake.loads.empty());
  fake.paramSizes = {8, 4, 4};
  CUstream stream = fakeHandle<CUstream>(0x777);
  library.launch(bwd, stream, bwdSizes(), bwdValues());

  ASSERT_EQ(fake.loads.size(), 1u);
  EXPECT_EQ(fake.loads[0].image, fakeCubin(kName));
  EXPECT_EQ(fake.functionNames, std::vector<std::string>{"smla_bwd_kernel"});
  ASSERT_EQ(fake.attributes.size(), 1u); // 96 KiB > 48 KiB: opt in
  EXPECT_EQ(fake.attributes[0].attribute,
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  EXPECT_EQ(fake.attributes[0].value, 98304);

  ASSERT_EQ(fake.launches.size(), 1u);
  const FakeDriver::Launch &launch = fake.launches[0];
  EXPECT_EQ(launch.config.gridDimX, 100u); // ceil_div(T, 1)
  EXPECT_EQ(launch.config.gridDimY, 1u);   // G
  EXPECT_EQ(launch.config.gridDimZ, 1u);
  EXPECT_EQ(launch.config.blockDimX, 128u);
  EXPECT_EQ(launch.config.blockDimY, 1u);
  EXPECT_EQ(launch.config.sharedMemBytes, 98304u);
  EXPECT_EQ(launch.config.hStream, stream);
  EXPECT_EQ(launch.config.numAttrs, 0u);
  uint64_t q;
  int32_t T;
  float scale;
  std::memcpy(&q, launch.params[0].data(), 8);
  std::memcpy(&T, launch.params[1].data(), 4);
  std::memcpy(&scale, launch.params[2].data(), 4);
  EXPECT_EQ(q, 0xabc000u);
  EXPECT_EQ(T, 100);
  EXPECT_EQ(scale, 0.5f);
}

TEST_F(KernelLibraryTest, CachesPerContextAndKernel) {
  fake.paramSizes = {};
  library.launch(bwd, nullptr, bwdSizes(), bwdValues());
  library.launch(bwd, nullptr, bwdSizes(7), bwdValues());
  EXPECT_EQ(fake.loads.size(), 1u);
  EXPECT_EQ(fake.functionNames.size(), 1u);
  EXPECT_EQ(fake.attributes.size(), 1u);
  ASSERT_EQ(fake.launches.size(), 2u);
  EXPECT_EQ(fake.launches[1].config.gridDimX, 7u);
  EXPECT_EQ(fake.launches[0].function, fake.launches[1].function);

  // A second context loads its own module and function.
  CUcontext first = fake.current;
  fake.current = fakeHandle<CUcontext>(0x2000);
  CUfunction other = library.function(bwd);
  EXPECT_EQ(fake.loads.size(), 2u);
  EXPECT_EQ(fake.loads[1].context, fakeHandle<CUcontext>(0x2000));
  EXPECT_NE(other, fake.launches[0].function);
  fake.current = first;
  EXPECT_EQ(library.function(bwd), fake.launches[0].function);
  EXPECT_EQ(library.loadedModuleCount(), 2u);
}

TEST_F(KernelLibraryTest, SmallSharedMemoryNeedsNoAttribute) {
  library.launch(delta, nullptr, bwdSizes(10),
                 {{"q", ParamValue::ptr(nullptr)},
                  {"T", ParamValue::i32(10)},
                  {"sm_scale", ParamValue::f32(1)}});
  EXPECT_TRUE(fake.attributes.empty());
  ASSERT_EQ(fake.launches.size(), 1u);
  EXPECT_EQ(fake.launches[0].config.gridDimX, 3u);  // ceil_div(10, 4)
  EXPECT_EQ(fake.launches[0].config.gridDimY, 16u); // H
  EXPECT_EQ(fake.launches[0].config.blockDimX, 256u);
}

TEST_F(KernelLibraryTest, KernelsSharingACubinShareTheModule) {
  std::vector<KernelJson> kernels = twoKernels();
  kernels[1].cubin = "\"" + std::string(kName) + ".cubin\"";
  kernels[1].sha256 = "\"" + sha256Hex(fakeCubin(kName)) + "\"";
  std::map<std::string, std::string> cubins = {
      {std::string(kName) + ".cubin", fakeCubin(kName)}};
  KernelLibrary shared =
      KernelLibrary::fromMemory(manifestText(kernels), cubins, &api);
  shared.function(shared.kernel(kName));
  shared.function(shared.kernel("smla_delta"));
  EXPECT_EQ(fake.loads.size(), 1u);
  ASSERT_EQ(fake.functionModules.size(), 2u);
  EXPECT_EQ(fake.functionModules[0], fake.functionModules[1]);
  EXPECT_EQ(fake.functionNames,
            (std::vector<std::string>{"smla_bwd_kernel", "smla_delta_kernel"}));
}

TEST_F(KernelLibraryTest, WithoutAContextUsesDeviceZerosPrimaryContext) {
  fake.current = nullptr;
  library.function(bwd);
  EXPECT_EQ(fake.primaryRetains, 1);
  EXPECT_EQ(fake.current, fakeHandle<CUcontext>(0x5000));
  EXPECT_EQ(fake.loads.at(0).context, fakeHandle<CUcontext>(0x5000));
}

TEST_F(KernelLibraryTest, DriverFailuresNameCallKernelAndConfig) {
  fake.failures["cuModuleLoadData"] = CUDA_ERROR_INVALID_IMAGE;
  EXPECT_EQ(
      SMLA_ERROR_MESSAGE(library.launch(bwd, nullptr, bwdSizes(), bwdValues())),
      "smla: cuModuleLoadData failed for " + kDescribed +
          ": CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)");
  EXPECT_EQ(library.loadedModuleCount(), 0u); // a failed load is not cached
  fake.failures.clear();
  EXPECT_NO_THROW(library.function(bwd)); // and is retried
  EXPECT_EQ(fake.loads.size(), 1u);

  fake.failures["cuLaunchKernelEx"] = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  EXPECT_EQ(
      SMLA_ERROR_MESSAGE(library.launch(bwd, nullptr, bwdSizes(), bwdValues())),
      "smla: cuLaunchKernelEx failed for " + kDescribed +
          ": CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (too many resources "
          "requested for launch)");
  fake.failures["cuCtxGetCurrent"] = CUresult(999);
  EXPECT_EQ(SMLA_ERROR_MESSAGE(library.function(delta)),
            "smla: cuCtxGetCurrent failed for kernel 'smla_delta' (d=512): "
            "CUDA error 999 (unknown)");
}

TEST_F(KernelLibraryTest, AttributeAndEntryFailuresAreReported) {
  fake.failures["cuFuncSetAttribute"] = CUDA_ERROR_INVALID_VALUE;
  EXPECT_EQ(SMLA_ERROR_MESSAGE(library.function(bwd)),
            "smla: cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) failed "
            "for " +
                kDescribed +
                ": CUDA_ERROR_INVALID_VALUE (invalid "
                "argument)");

  std::vector<KernelJson> kernels = {KernelJson()};
  kernels[0].entry = "\"missing_entry\"";
  KernelLibrary bad = KernelLibrary::fromMemory(manifestText(kernels),
                                                cubinsFor(kernels), &api);
  EXPECT_EQ(SMLA_ERROR_MESSAGE(bad.function(bad.kernel(kName))),
            "smla: cuModuleGetFunction('missing_entry') failed for " +
                kDescribed + ": CUDA_ERROR_NOT_FOUND (named symbol not found)");
}

TEST_F(KernelLibraryTest, ArgumentErrorsComeBeforeAnyDriverCall) {
  fake.failures["cuCtxGetCurrent"] = CUDA_ERROR_INVALID_VALUE;
  ParamValues values = bwdValues();
  values.erase("sm_scale");
  EXPECT_EQ(
      SMLA_ERROR_MESSAGE(library.launch(bwd, nullptr, bwdSizes(), values)),
      "smla: no value given for parameter 'sm_scale' (f32) of " + kDescribed);
  // An empty grid is a no-op, not a driver call.
  EXPECT_NO_THROW(library.launch(bwd, nullptr, bwdSizes(0), bwdValues()));
  EXPECT_TRUE(fake.launches.empty());
  EXPECT_TRUE(fake.loads.empty());
}

TEST_F(KernelLibraryTest, ConcurrentLaunchesLoadOnce) {
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      for (int j = 0; j < 50; ++j)
        library.launch(bwd, nullptr, bwdSizes(1 + j), bwdValues());
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(fake.loads.size(), 1u);
  EXPECT_EQ(fake.functionNames.size(), 1u);
  EXPECT_EQ(fake.launches.size(), 400u);
}

TEST_F(KernelLibraryTest, UnloadsItsModulesOnDestruction) {
  {
    KernelLibrary scoped = KernelLibrary::fromMemory(
        manifestText(twoKernels()), cubinsFor(twoKernels()), &api);
    scoped.function(scoped.kernel(kName));
    scoped.function(scoped.kernel("smla_delta"));
    KernelLibrary moved = std::move(scoped); // the moved-from one owns nothing
  }
  EXPECT_EQ(fake.unloaded.size(), 2u);
}

TEST_F(KernelLibraryTest, LookupErrors) {
  EXPECT_EQ(SMLA_ERROR_MESSAGE(library.kernel("nope")),
            "smla: the manifest has no kernel named 'nope' (kernels: " +
                std::string(kName) + ", smla_delta)");
  Manifest other = Manifest::parse(manifestText({KernelJson()}));
  EXPECT_EQ(SMLA_ERROR_MESSAGE(library.function(other.kernels[0])),
            "smla: " + kDescribed +
                " does not belong to this KernelLibrary's manifest");
  KernelRequest request;
  request.positions = true;
  EXPECT_EQ(&library.select(request), &bwd);
}

TEST(KernelLibrary, HashMismatchAndMissingCubinAreErrors) {
  std::vector<KernelJson> kernels = {KernelJson()};
  std::map<std::string, std::string> cubins = cubinsFor(kernels);
  std::string expected = sha256Hex(fakeCubin(kName));
  cubins.begin()->second += "tampered";
  std::string actual = sha256Hex(cubins.begin()->second);
  EXPECT_EQ(SMLA_ERROR_MESSAGE(
                KernelLibrary::fromMemory(manifestText(kernels), cubins)),
            "smla: cubin 'smla_bwd_d512_dt64_h16_g1_lse2_pos.cubin' of " +
                kDescribed + " has sha256 " + actual +
                ", but the manifest expects " + expected +
                "; the cubin and the manifest come from different builds");
  EXPECT_EQ(
      SMLA_ERROR_MESSAGE(KernelLibrary::fromMemory(manifestText(kernels), {})),
      "smla: no cubin named 'smla_bwd_d512_dt64_h16_g1_lse2_pos.cubin' "
      "was provided for " +
          kDescribed + " (0 cubins provided)");
}

/// A fresh directory under the system's temporary directory.
std::string makeTempDir() {
  const char *base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/smla-rt-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  EXPECT_NE(mkdtemp(buffer.data()), nullptr);
  return buffer.data();
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(KernelLibrary, ReadsADirectory) {
  std::string dir = makeTempDir();
  std::vector<KernelJson> kernels = twoKernels();
  writeFile(dir + "/manifest.json", manifestText(kernels));
  writeFile(dir + "/" + kName + ".cubin", fakeCubin(kName));
  std::string deltaPath = dir + "/smla_delta.cubin";
  EXPECT_EQ(SMLA_ERROR_MESSAGE(KernelLibrary::fromDirectory(dir)),
            "smla: cannot read the cubin '" + deltaPath +
                "' of kernel 'smla_delta' (d=512): No such file or directory");
  writeFile(deltaPath, fakeCubin("smla_delta"));
  KernelLibrary library = KernelLibrary::fromDirectory(dir + "/");
  EXPECT_EQ(library.manifest().kernels.size(), 2u);
  EXPECT_EQ(library.manifest().target, "sm_90a");

  writeFile(deltaPath, "corrupt");
  EXPECT_NE(SMLA_ERROR_MESSAGE(KernelLibrary::fromDirectory(dir))
                .find("of kernel 'smla_delta' (d=512) has sha256 " +
                      sha256Hex("corrupt")),
            std::string::npos);

  writeFile(dir + "/manifest.json", "{\"format\": \"smla-manifest\"}");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(KernelLibrary::fromDirectory(dir)),
            "smla: manifest error at 1:1: missing required key 'version' [in " +
                dir + "/manifest.json]");
  for (const char *file : {"manifest.json", "smla_delta.cubin"})
    std::remove((dir + "/" + file).c_str());
  std::remove((dir + "/" + kName + ".cubin").c_str());
  EXPECT_EQ(SMLA_ERROR_MESSAGE(KernelLibrary::fromDirectory(dir)),
            "smla: cannot read manifest '" + dir +
                "/manifest.json': No such file or directory");
  rmdir(dir.c_str());
}

TEST(KernelLibrary, MissingDriverIsAClearErrorAtFirstUse) {
  if (void *handle = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL)) {
    dlclose(handle);
    GTEST_SKIP() << kDriverLibrary << " is present on this machine";
  }
  std::vector<KernelJson> kernels = {KernelJson()};
  // Opening the library needs no driver.
  KernelLibrary library =
      KernelLibrary::fromMemory(manifestText(kernels), cubinsFor(kernels));
  const KernelEntry &kernel = library.kernel(kName);
  std::string message = SMLA_ERROR_MESSAGE(
      library.launch(kernel, nullptr, bwdSizes(), bwdValues()));
  EXPECT_EQ(message.rfind("smla: cannot load " + kDescribed +
                              ": the CUDA driver is not available: "
                              "dlopen(\"libcuda.so.1\") failed: libcuda.so.1: ",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find(". The smla runtime needs an NVIDIA GPU with its "
                         "driver installed"),
            std::string::npos)
      << message;
}

} // namespace
