//===- FakeDriver.h - A recording stand-in for the CUDA driver --*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// A DriverApi whose entry points record what the runtime asks of the driver
// and return injected failures, so loading, caching and launching can be
// tested on a machine without a GPU. Handles are opaque fake addresses.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_RUNTIME_TEST_FAKEDRIVER_H
#define SMLA_RUNTIME_TEST_FAKEDRIVER_H

#include "smla/runtime/Driver.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace smla::runtime::test {

template <typename Handle> Handle fakeHandle(uintptr_t value) {
  return reinterpret_cast<Handle>(value);
}

class FakeDriver {
public:
  struct Load {
    CUcontext context;
    std::string image;
  };
  struct Launch {
    CUlaunchConfig config;
    CUfunction function;
    std::vector<std::vector<uint8_t>> params;
  };

  /// Installs this fake as the one its entry points talk to.
  FakeDriver() { instance() = this; }
  ~FakeDriver() { instance() = nullptr; }

  DriverApi api() const {
    DriverApi api;
    api.init = [](unsigned) { return result("cuInit"); };
    api.deviceGet = [](CUdevice *device, int ordinal) {
      *device = ordinal;
      return result("cuDeviceGet");
    };
    api.ctxGetCurrent = [](CUcontext *context) {
      *context = self().current;
      return result("cuCtxGetCurrent");
    };
    api.ctxGetDevice = [](CUdevice *device) {
      *device = 0;
      return result("cuCtxGetDevice");
    };
    api.devicePrimaryCtxRetain = [](CUcontext *context, CUdevice device) {
      *context = fakeHandle<CUcontext>(0x5000 + device);
      self().primaryRetains++;
      return result("cuDevicePrimaryCtxRetain");
    };
    api.ctxSetCurrent = [](CUcontext context) {
      self().current = context;
      return result("cuCtxSetCurrent");
    };
    api.moduleLoadData = [](CUmodule *module, const void *image) {
      std::lock_guard<std::mutex> lock(self().mutex);
      if (CUresult failure = result("cuModuleLoadData"))
        return failure;
      self().loads.push_back(
          {self().current, std::string(static_cast<const char *>(image))});
      *module = fakeHandle<CUmodule>(0x10000 + self().loads.size());
      return CUDA_SUCCESS;
    };
    api.moduleGetFunction = [](CUfunction *function, CUmodule module,
                               const char *name) {
      std::lock_guard<std::mutex> lock(self().mutex);
      if (std::string(name) == "missing_entry")
        return CUDA_ERROR_NOT_FOUND;
      self().functionNames.push_back(name);
      self().functionModules.push_back(module);
      *function = fakeHandle<CUfunction>(0x20000 + self().functionNames.size());
      return CUDA_SUCCESS;
    };
    api.funcSetAttribute = [](CUfunction function, CUfunction_attribute attr,
                              int value) {
      std::lock_guard<std::mutex> lock(self().mutex);
      self().attributes.push_back({function, attr, value});
      return result("cuFuncSetAttribute");
    };
    api.launchKernelEx = [](const CUlaunchConfig *config, CUfunction function,
                            void **params, void **extra) {
      std::lock_guard<std::mutex> lock(self().mutex);
      if (extra != nullptr)
        return CUDA_ERROR_INVALID_VALUE;
      if (CUresult failure = result("cuLaunchKernelEx"))
        return failure;
      Launch launch{*config, function, {}};
      for (size_t i = 0; i < self().paramSizes.size(); ++i) {
        const auto *bytes = static_cast<const uint8_t *>(params[i]);
        launch.params.emplace_back(bytes, bytes + self().paramSizes[i]);
      }
      self().launches.push_back(launch);
      return CUDA_SUCCESS;
    };
    api.getErrorName = [](CUresult error, const char **name) {
      *name = nullptr;
      for (const auto &known : kErrors)
        if (known.code == error)
          *name = known.name;
      return *name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    };
    api.getErrorString = [](CUresult error, const char **text) {
      *text = nullptr;
      for (const auto &known : kErrors)
        if (known.code == error)
          *text = known.text;
      return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    };
    api.moduleUnload = [](CUmodule module) {
      std::lock_guard<std::mutex> lock(self().mutex);
      self().unloaded.push_back(module);
      return CUDA_SUCCESS;
    };
    return api;
  }

  struct Attribute {
    CUfunction function;
    CUfunction_attribute attribute;
    int value;
  };

  std::mutex mutex;
  CUcontext current = fakeHandle<CUcontext>(0x1000);
  std::map<std::string, CUresult> failures; // by CUDA call name
  std::vector<size_t> paramSizes;           // bytes recorded per launch param
  int primaryRetains = 0;
  std::vector<Load> loads;
  std::vector<std::string> functionNames;
  std::vector<CUmodule> functionModules;
  std::vector<Attribute> attributes;
  std::vector<Launch> launches;
  std::vector<CUmodule> unloaded;

private:
  struct KnownError {
    CUresult code;
    const char *name;
    const char *text;
  };
  static constexpr KnownError kErrors[] = {
      {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE",
       "invalid argument"},
      {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE",
       "device kernel image is invalid"},
      {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
      {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
       "too many resources requested for launch"},
      {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
       "no CUDA-capable device is detected"},
  };

  static FakeDriver *&instance() {
    static FakeDriver *current = nullptr;
    return current;
  }
  static FakeDriver &self() { return *instance(); }
  static CUresult result(const char *call) {
    auto found = self().failures.find(call);
    return found == self().failures.end() ? CUDA_SUCCESS : found->second;
  }
};

} // namespace smla::runtime::test

#endif // SMLA_RUNTIME_TEST_FAKEDRIVER_H
