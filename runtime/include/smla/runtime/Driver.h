//===- Driver.h - The CUDA driver, loaded at run time -----------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// The runtime never links against libcuda: it dlopens "libcuda.so.1" the
// first time a kernel is loaded, so the library (and its tests) build and run
// on machines without a GPU, and a missing driver is a clear error at first
// use rather than a loader failure at import.
//
// DriverApi is a plain table of the entry points the runtime uses. Tests hand
// KernelLibrary a table of fakes to exercise loading, caching and launching
// without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_RUNTIME_DRIVER_H
#define SMLA_RUNTIME_DRIVER_H

#include <cuda.h>

#include <string>

namespace smla::runtime {

/// The driver entry points, with the signatures of CUDA 12.0's ABI. Member
/// names drop the "cu" prefix because cuda.h #defines some of those names.
struct DriverApi {
  CUresult(CUDAAPI *init)(unsigned int flags) = nullptr;
  CUresult(CUDAAPI *deviceGet)(CUdevice *device, int ordinal) = nullptr;
  CUresult(CUDAAPI *ctxGetCurrent)(CUcontext *ctx) = nullptr;
  CUresult(CUDAAPI *ctxGetDevice)(CUdevice *device) = nullptr;
  CUresult(CUDAAPI *devicePrimaryCtxRetain)(CUcontext *ctx,
                                            CUdevice device) = nullptr;
  CUresult(CUDAAPI *ctxSetCurrent)(CUcontext ctx) = nullptr;
  CUresult(CUDAAPI *moduleLoadData)(CUmodule *module,
                                    const void *image) = nullptr;
  CUresult(CUDAAPI *moduleGetFunction)(CUfunction *function, CUmodule module,
                                       const char *name) = nullptr;
  CUresult(CUDAAPI *funcSetAttribute)(CUfunction function,
                                      CUfunction_attribute attribute,
                                      int value) = nullptr;
  CUresult(CUDAAPI *launchKernelEx)(const CUlaunchConfig *config,
                                    CUfunction function, void **params,
                                    void **extra) = nullptr;
  CUresult(CUDAAPI *getErrorName)(CUresult error, const char **name) = nullptr;
  CUresult(CUDAAPI *getErrorString)(CUresult error,
                                    const char **text) = nullptr;
  CUresult(CUDAAPI *moduleUnload)(CUmodule module) = nullptr;
};

/// The shared object the runtime loads.
inline constexpr const char *kDriverLibrary = "libcuda.so.1";

/// dlopens `library` and resolves every DriverApi entry point (through
/// cuGetProcAddress_v2 when the driver has it, else dlsym). Does not call
/// cuInit. Throws Error when the library or an entry point is missing; the
/// handle is never closed.
DriverApi loadDriver(const char *library = kDriverLibrary);

/// The process-wide driver: loadDriver(kDriverLibrary) plus cuInit(0), done
/// once, by whichever call comes before every other. Throws Error (on every call) if either failed.
const DriverApi &systemDriver();

/// "CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)", or
/// "CUDA error 999 (unknown)" for a code the driver cannot name.
std::string cudaErrorText(const DriverApi &driver, CUresult result);

} // namespace smla::runtime

#endif // SMLA_RUNTIME_DRIVER_H
