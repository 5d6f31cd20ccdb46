//===- Driver.cpp - The CUDA driver, loaded at run time -------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Driver.h"

#include "smla/runtime/Error.h"

#include <dlfcn.h>

namespace smla::runtime {

namespace {

// The ABI version whose signatures DriverApi declares. cuGetProcAddress
// returns the newest variant of a symbol compatible with this version, so a
// newer driver never hands us a function with a changed signature.
constexpr int kDriverAbiVersion = 12000;

using GetProcAddressFn = CUresult(CUDAAPI *)(const char *, void **, int,
                                             cuuint64_t,
                                             CUdriverProcAddressQueryResult *);

class Resolver {
public:
  Resolver(void *handle, const char *library)
      : handle_(handle), library_(library) {
    getProcAddress_ = reinterpret_cast<GetProcAddressFn>(
        dlsym(handle, "cuGetProcAddress_v2"));
  }

  template <typename Fn> void resolve(Fn &slot, const char *symbol) {
    void *address = nullptr;
    if (getProcAddress_) {
      CUdriverProcAddressQueryResult status;
      // Legacy default-stream semantics for stream 0, as the CUDA runtime
      // and PyTorch use by default.
      if (getProcAddress_(symbol, &address, kDriverAbiVersion,
                          CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                          &status) != CUDA_SUCCESS ||
          status != CU_GET_PROC_ADDRESS_SUCCESS)
        address = nullptr;
    }
    if (!address)
      address = dlsym(handle_, symbol);
    if (!address)
      throw Error(std::string("smla: the CUDA driver '") + library_ +
                  "' has no entry point " + symbol +
                  "; the runtime needs a driver for CUDA 12.0 or newer");
    slot = reinterpret_cast<Fn>(address);
  }

private:
  void *handle_;
  const char *library_;
  GetProcAddressFn getProcAddress_ = nullptr;
};

} // namespace

DriverApi loadDriver(const char *library) {
  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *reason = dlerror();
    throw Error(std::string("smla: the CUDA driver is not available: "
                            "dlopen(\"") +
                library + "\") failed: " + (reason ? reason : "unknown") +
                ". The smla runtime needs an NVIDIA GPU with its driver "
                "installed");
  }
  Resolver resolver(handle, library);
  DriverApi api;
  resolver.resolve(api.init, "cuInit");
  resolver.resolve(api.deviceGet, "cuDeviceGet");
  resolver.resolve(api.ctxGetCurrent, "cuCtxGetCurrent");
  resolver.resolve(api.ctxGetDevice, "cuCtxGetDevice");
  resolver.resolve(api.devicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  resolver.resolve(api.ctxSetCurrent, "cuCtxSetCurrent");
  resolver.resolve(api.moduleLoadData, "cuModuleLoadData");
  resolver.resolve(api.moduleGetFunction, "cuModuleGetFunction");
  resolver.resolve(api.funcSetAttribute, "cuFuncSetAttribute");
  resolver.resolve(api.launchKernelEx, "cuLaunchKernelEx");
  resolver.resolve(api.getErrorName, "cuGetErrorName");
  resolver.resolve(api.getErrorString, "cuGetErrorString");
  resolver.resolve(api.moduleUnload, "cuModuleUnload");
  return api;
}

const DriverApi &systemDriver() {
  struct Loaded {
    DriverApi api;
    std::string error;
  };
  // Thread-safe one-time initialization; a failure is remembered, as the
  // driver itself remembers a failed cuInit.
  static const Loaded loaded = [] {
    Loaded out;
    try {
      out.api = loadDriver(kDriverLibrary);
      if (CUresult result = out.api.init(0); result != CUDA_SUCCESS)
        out.error = "smla: cuInit failed: " + cudaErrorText(out.api, result);
    } catch (const Error &error) {
      out.error = error.what();
    }
    return out;
  }();
  if (!loaded.error.empty())
    throw Error(loaded.error);
  return loaded.api;
}

std::string cudaErrorText(const DriverApi &driver, CUresult result) {
  const char *name = nullptr;
  const char *text = nullptr;
  if (driver.getErrorName)
    driver.getErrorName(result, &name);
  if (driver.getErrorString)
    driver.getErrorString(result, &text);
  std::string out =
      name ? std::string(name) : "CUDA error " + std::to_string(int(result));
  return out + " (" + (text ? text : "unknown") + ")";
}

} // namespace smla::runtime
