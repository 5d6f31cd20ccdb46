//===- KernelDirectory.cpp - Finding and caching the kernels --------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "KernelDirectory.h"

#include "smla/runtime/Error.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <set>

namespace smla::ext {
namespace {

struct Libraries {
  std::mutex mutex;
  std::string packageDirectory;
  /// smla.config.kernel_dir; "" for the package's.
  std::string configuredDirectory;
  /// Every library opened, by absolute directory; never freed (kernels
  /// from it may still run, and unloading from a static destructor would
  /// run after the driver may be gone).
  std::map<std::string, runtime::KernelLibrary *> opened;
  std::vector<std::string> added;
  /// (directory, device) pairs whose target was checked and fits.
  std::set<std::pair<std::string, int>> fits;
};

Libraries &libraries() {
  static auto *state = new Libraries();
  return *state;
}

std::string absolute(const std::string &path) {
  if (!path.empty() && path.front() == '/')
    return path;
  std::string cwd(4096, '\0');
  while (getcwd(cwd.data(), cwd.size()) == nullptr) {
    if (errno != ERANGE)
      throw runtime::Error(std::string("smla: cannot resolve the relative "
                                       "kernel directory '") +
                           path + "': the working directory is unknown");
    cwd.resize(cwd.size() * 2);
  }
  cwd.resize(std::char_traits<char>::length(cwd.c_str()));
  return cwd + (cwd == "/" ? "" : "/") + path;
}

/// The library in `directory`, opened now if it was not before; `source`
/// says how the directory was chosen (for the error). Under the mutex.
runtime::KernelLibrary &open(Libraries &state, const std::string &directory,
                             const std::string &source) {
  auto found = state.opened.find(directory);
  if (found != state.opened.end())
    return *found->second;
  try {
    auto *library = new runtime::KernelLibrary(
        runtime::KernelLibrary::fromDirectory(directory));
    state.opened.emplace(directory, library);
    return *library;
  } catch (const runtime::Error &error) {
    throw runtime::Error(std::string(error.what()) + " (kernel directory '" +
                         directory + "', " + source + ")");
  }
}

std::string primarySource(const Libraries &state) {
  return !state.configuredDirectory.empty()
             ? std::string("set by smla.config.kernel_dir (SMLA_KERNEL_DIR)")
             : std::string("the installed package's library; set "
                           "SMLA_KERNEL_DIR or smla.configure(kernel_dir=...) "
                           "to use another");
}

/// kernels/ next to this shared object: the package's, for a module built
/// in place (python/smla/_C*.so) and imported without smla._compiled.
std::string moduleKernelDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void *>(&moduleKernelDirectory), &info) ==
          0 ||
      info.dli_fname == nullptr)
    return absolute("kernels");
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return absolute(slash == std::string::npos ? "kernels"
                                             : path.substr(0, slash) +
                                                   "/kernels");
}

std::string primaryDirectory(const Libraries &state) {
  if (!state.configuredDirectory.empty())
    return state.configuredDirectory;
  return state.packageDirectory.empty() ? moduleKernelDirectory()
                                        : state.packageDirectory;
}

} // namespace

void setPackageKernelDirectory(const std::string &directory) {
  Libraries &state = libraries();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.packageDirectory = absolute(directory);
}

void setKernelDirectory(const std::string &directory) {
  Libraries &state = libraries();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.configuredDirectory = directory.empty() ? "" : absolute(directory);
}

std::string kernelDirectory() {
  Libraries &state = libraries();
  std::lock_guard<std::mutex> lock(state.mutex);
  return primaryDirectory(state);
}

runtime::KernelLibrary &kernelLibrary() {
  Libraries &state = libraries();
  std::lock_guard<std::mutex> lock(state.mutex);
  return open(state, primaryDirectory(state), primarySource(state));
}

void addKernelDirectory(const std::string &directory) {
  Libraries &state = libraries();
  std::lock_guard<std::mutex> lock(state.mutex);
  std::string path = absolute(directory);
  open(state, path, "compiled on first use into the cache");
  for (const std::string &added : state.added)
    if (added == path)
      return;
  state.added.push_back(path);
}

std::vector<LoadedLibrary> kernelLibraries() {
  Libraries &state = libraries();
  std::lock_guard<std::mutex> lock(state.mutex);
  std::string primary = primaryDirectory(state);
  std::vector<LoadedLibrary> out{
      {&open(state, primary, primarySource(state)), primary}};
  for (const std::string &added : state.added)
    if (added != primary)
      out.push_back({state.opened.at(added), added});
  return out;
}

void checkDeviceTarget(const LoadedLibrary &library, int device) {
  Libraries &state = libraries();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.fits.count({library.directory, device}))
      return;
  }
  const cudaDeviceProp *prop = at::cuda::getDeviceProperties(device);
  std::string why =
      library.library->manifest().deviceMismatch(prop->major, prop->minor);
  TORCH_CHECK(why.empty(), "smla: device cuda:", device, " (", prop->name,
              ") cannot run the kernels in '", library.directory, "': ", why,
              "; on this device use mode='reference'");
  std::lock_guard<std::mutex> lock(state.mutex);
  state.fits.insert({library.directory, device});
}

bool takesParam(const runtime::KernelEntry &entry, const char *name) {
  for (const runtime::ParamSpec &param : entry.params)
    if (param.name == name)
      return true;
  return false;
}

} // namespace smla::ext
