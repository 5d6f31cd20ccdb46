//===- Launcher.cpp - Loading and launching the compiled kernels ----------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Launcher.h"

#include "smla/runtime/Error.h"
#include "smla/runtime/LibraryFiles.h"

#include <mutex>
#include <set>
#include <utility>

namespace smla::runtime {

struct KernelLibrary::State {
  Manifest manifest;
  std::map<std::string, std::string> cubins; // by manifest "cubin" value
  const DriverApi *driver = nullptr;         // nullptr: systemDriver()

  mutable std::mutex mutex; // guards the two caches
  std::map<std::pair<CUcontext, std::string>, CUmodule> modules;
  std::map<std::pair<CUcontext, size_t>, CUfunction> functions;
};

namespace {

[[noreturn]] void failCuda(const DriverApi &driver, CUresult result,
                           const char *call, const KernelEntry &kernel) {
  throw Error(std::string("smla: ") + call + " failed for " +
              kernel.describe() + ": " + cudaErrorText(driver, result));
}

void check(const DriverApi &driver, CUresult result, const char *call,
           const KernelEntry &kernel) {
  if (result != CUDA_SUCCESS)
    failCuda(driver, result, call, kernel);
}

/// Checks that every kernel's cubin is present and matches its digest, and
/// keeps only the cubins the manifest names.
std::map<std::string, std::string>
verifiedCubins(const Manifest &manifest,
               std::map<std::string, std::string> cubins) {
  std::map<std::string, std::string> kept;
  for (const KernelEntry &kernel : manifest.kernels) {
    auto found = cubins.find(kernel.cubin);
    if (found == cubins.end()) {
      if (kept.count(kernel.cubin)) {
        verifyCubin(kernel, kept.at(kernel.cubin));
        continue;
      }
      throw Error("smla: no cubin named '" + kernel.cubin +
                  "' was provided for " + kernel.describe() + " (" +
                  std::to_string(cubins.size() + kept.size()) +
                  " cubins provided)");
    }
    verifyCubin(kernel, found->second);
    kept.insert(cubins.extract(found));
  }
  return kept;
}

/// The context to load into: the current one, or else device 0's primary
/// context, made current (what the CUDA runtime does on first use).
CUcontext currentContext(const DriverApi &driver, const KernelEntry &kernel) {
  CUcontext context = nullptr;
  check(driver, driver.ctxGetCurrent(&context), "cuCtxGetCurrent", kernel);
  if (context)
    return context;
  CUdevice device = 0;
  check(driver, driver.deviceGet(&device, 0), "cuDeviceGet", kernel);
  check(driver, driver.devicePrimaryCtxRetain(&context, device),
        "cuDevicePrimaryCtxRetain", kernel);
  check(driver, driver.ctxSetCurrent(context), "cuCtxSetCurrent", kernel);
  return context;
}

} // namespace

KernelLibrary::KernelLibrary(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
KernelLibrary::KernelLibrary(KernelLibrary &&) noexcept = default;
KernelLibrary &KernelLibrary::operator=(KernelLibrary &&) noexcept = default;

KernelLibrary::~KernelLibrary() {
  if (!state_ || state_->modules.empty())
    return;
  try {
    const DriverApi &driver = state_->driver ? *state_->driver : systemDriver();
    // Failures (a destroyed context, a driver shutting down) are ignored:
    // there is nothing left to release in either case.
    for (const auto &entry : state_->modules)
      driver.moduleUnload(entry.second);
  } catch (const Error &) {
  }
}

KernelLibrary
KernelLibrary::fromMemory(std::string_view manifestText,
                          std::map<std::string, std::string> cubins,
                          const DriverApi *driver) {
  auto state = std::make_unique<State>();
  state->manifest = Manifest::parse(manifestText);
  state->cubins = verifiedCubins(state->manifest, std::move(cubins));
  state->driver = driver;
  return KernelLibrary(std::move(state));
}

KernelLibrary KernelLibrary::fromDirectory(const std::string &directory,
                                           const DriverApi *driver) {
  LibraryDirectory dir(directory);
  const std::string manifestPath = dir.pathOf("manifest.json");
  auto state = std::make_unique<State>();
  std::string text = dir.read("manifest.json", kMaxManifestBytes, "manifest");
  try {
    state->manifest = Manifest::parse(text);
  } catch (const Error &error) {
    throw Error(std::string(error.what()) + " [in " + manifestPath + "]");
  }
  std::map<std::string, std::string> cubins;
  for (const KernelEntry &kernel : state->manifest.kernels)
    if (!cubins.count(kernel.cubin))
      cubins.emplace(kernel.cubin,
                     dir.read(kernel.cubin, kMaxCubinBytes, "the cubin",
                              " of " + kernel.describe()));
  state->cubins = verifiedCubins(state->manifest, std::move(cubins));
  state->driver = driver;
  return KernelLibrary(std::move(state));
}

const Manifest &KernelLibrary::manifest() const { return state_->manifest; }

const KernelEntry &KernelLibrary::select(const KernelRequest &request) const {
  return state_->manifest.select(request);
}

const KernelEntry *KernelLibrary::match(const KernelRequest &request) const {
  return state_->manifest.match(request);
}

const KernelEntry &KernelLibrary::kernel(std::string_view name) const {
  if (const KernelEntry *kernel = state_->manifest.find(name))
    return *kernel;
  std::string names;
  for (const KernelEntry &kernel : state_->manifest.kernels)
    names += (names.empty() ? "" : ", ") + kernel.name;
  throw Error("smla: the manifest has no kernel named '" + std::string(name) +
              "' (kernels: " + (names.empty() ? "none" : names) + ")");
}

CUfunction KernelLibrary::function(const KernelEntry &kernel) {
  const std::vector<KernelEntry> &kernels = state_->manifest.kernels;
  std::less<const KernelEntry *> before;
  if (kernels.empty() || before(&kernel, kernels.data()) ||
      !before(&kernel, kernels.data() + kernels.size()))
    throw Error("smla: " + kernel.describe() +
                " does not belong to this KernelLibrary's manifest");
  size_t index = static_cast<size_t>(&kernel - kernels.data());

  const DriverApi *driver = state_->driver;
  if (!driver) {
    try {
      driver = &systemDriver();
    } catch (const Error &error) {
      throw Error("smla: cannot load " + kernel.describe() + ": " +
                  (error.what() + 6));
    }
  }
  CUcontext context = currentContext(*driver, kernel);

  std::lock_guard<std::mutex> lock(state_->mutex);
  auto cached = state_->functions.find({context, index});
  if (cached != state_->functions.end())
    return cached->second;

  CUmodule &module = state_->modules[{context, kernel.cubin}];
  if (!module) {
    CUresult result =
        driver->moduleLoadData(&module, state_->cubins.at(kernel.cubin).data());
    if (result != CUDA_SUCCESS) {
      state_->modules.erase({context, kernel.cubin});
      failCuda(*driver, result, "cuModuleLoadData", kernel);
    }
  }
  CUfunction function = nullptr;
  check(*driver,
        driver->moduleGetFunction(&function, module, kernel.entry.c_str()),
        ("cuModuleGetFunction('" + kernel.entry + "')").c_str(), kernel);
  // Beyond 48 KiB a kernel must opt in to its dynamic shared memory.
  if (kernel.launch.dynamicSmem > kDefaultDynamicSmemLimit)
    check(*driver,
          driver->funcSetAttribute(
              function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
              static_cast<int>(kernel.launch.dynamicSmem)),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", kernel);
  state_->functions.emplace(std::make_pair(context, index), function);
  return function;
}

void KernelLibrary::launch(const KernelEntry &kernel, CUstream stream,
                           const GridSizes &sizes, const ParamValues &values) {
  LaunchGeometry geometry = launchGeometry(kernel, sizes);
  PackedParams params = packParams(kernel, values);
  if (geometry.empty())
    return;
  CUfunction function = this->function(kernel);

  CUlaunchConfig config{};
  config.gridDimX = geometry.grid[0];
  config.gridDimY = geometry.grid[1];
  config.gridDimZ = geometry.grid[2];
  config.blockDimX = geometry.block[0];
  config.blockDimY = geometry.block[1];
  config.blockDimZ = geometry.block[2];
  config.sharedMemBytes = geometry.dynamicSmem;
  config.hStream = stream;
  const DriverApi &driver = state_->driver ? *state_->driver : systemDriver();
  check(
      driver,
      driver.launchKernelEx(&config, function, params.kernelParams(), nullptr),
      "cuLaunchKernelEx", kernel);
}

size_t KernelLibrary::loadedModuleCount() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->modules.size();
}

} // namespace smla::runtime
