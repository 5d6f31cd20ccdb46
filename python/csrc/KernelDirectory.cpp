//===- KernelDirectory.cpp - Finding and caching the kernels --------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "KernelDirectory.h"

#include "smla/runtime/Error.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace smla::ext {
namespace {

constexpr const char *kEnvVar = "SMLA_KERNEL_DIR";

/// The directory holding this shared object (the installed smla package).
std::string moduleDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void *>(&moduleDirectory), &info) == 0 ||
      info.dli_fname == nullptr)
    return ".";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

const char *envKernelDirectory() {
  const char *value = std::getenv(kEnvVar);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

} // namespace

std::string kernelDirectory() {
  if (const char *env = envKernelDirectory())
    return env;
  return moduleDirectory() + "/kernels";
}

runtime::KernelLibrary &kernelLibrary() {
  static std::mutex mutex;
  // Leaked on purpose: unloading modules from a static destructor would run
  // after PyTorch and the driver may already have torn down the contexts.
  static runtime::KernelLibrary *library = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (library != nullptr)
    return *library;
  std::string directory = kernelDirectory();
  try {
    library = new runtime::KernelLibrary(
        runtime::KernelLibrary::fromDirectory(directory));
  } catch (const runtime::Error &error) {
    std::string source =
        envKernelDirectory() != nullptr
            ? std::string("from the environment variable ") + kEnvVar
            : std::string("the package's kernels/ directory; set ") + kEnvVar +
                  " or install with -DSMLA_KERNEL_DIR=<dir>";
    throw runtime::Error(std::string(error.what()) + " (kernel directory '" +
                         directory + "', " + source + ")");
  }
  return *library;
}

bool takesParam(const runtime::KernelEntry &entry, const char *name) {
  for (const runtime::ParamSpec &param : entry.params)
    if (param.name == name)
      return true;
  return false;
}

} // namespace smla::ext
