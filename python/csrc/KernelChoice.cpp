//===- KernelChoice.cpp - The kernels a call runs, and why ----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "KernelChoice.h"

#include "smla/runtime/Error.h"

#include <c10/util/Exception.h>

namespace smla::ext {
namespace {

/// The manifest's name for an output element type.
const char *manifestType(at::ScalarType type) {
  return type == at::kFloat ? "f32" : "bf16";
}

} // namespace

runtime::KernelRequest makeRequest(const char *kind, const BwdConfig &config) {
  runtime::KernelRequest request;
  request.kind = kind;
  request.d = config.n.D;
  request.dt = config.n.Dt;
  request.heads = config.n.H;
  request.groups = config.n.G;
  request.lseBase = runtime::LseBase::Two;
  request.positions = config.positions;
  request.dqType = manifestType(config.dqDtype);
  request.dkvType = manifestType(config.dkvDtype);
  return request;
}

const runtime::KernelEntry *findBwd(const runtime::KernelLibrary &library,
                                    const BwdConfig &config, int64_t tokens) {
  BwdConfig folded = config;
  folded.n.H = config.n.H * tokens;
  for (at::ScalarType dkv :
       {config.dkvDtype,
        config.dkvDtype == at::kFloat ? at::kBFloat16 : at::kFloat}) {
    folded.dkvDtype = dkv;
    runtime::KernelRequest request = makeRequest("bwd", folded);
    request.tokens = tokens;
    if (const runtime::KernelEntry *bwd = library.match(request))
      return bwd;
  }
  return nullptr;
}

std::string compileConfig(const BwdConfig &config) {
  const BwdSizes &n = config.n;
  return "d=" + std::to_string(n.D) + ",dt=" + std::to_string(n.Dt) +
         ",heads=" + std::to_string(n.H) + ",groups=" + std::to_string(n.G) +
         ",lse=base2" +
         ",positions=" + (config.positions ? "1" : "0") +
         ",dq=" + manifestType(config.dqDtype) +
         ",dkv=" + manifestType(config.dkvDtype);
}

BwdSelection findInLibraries(const BwdConfig &config, std::string *why) {
  std::vector<LoadedLibrary> libraries = kernelLibraries();
  for (const LoadedLibrary &library : libraries)
    if (const runtime::KernelEntry *bwd = findBwd(*library.library, config, 1))
      return {library, bwd};
  if (why != nullptr) {
    try {
      libraries.front().library->select(makeRequest("bwd", config));
    } catch (const runtime::Error &error) {
      *why = error.what();
    }
    *why += "\nThe kernel library in '" + libraries.front().directory +
            "' has no kernel for the configuration " + compileConfig(config) +
            "; python/USAGE.md, \"Kernels outside the library\", says how "
            "to build one (smla compiles it on first use when smla-compile "
            "is on PATH or in SMLA_COMPILER)";
  }
  return {libraries.front(), nullptr};
}

BwdSelection selectBwd(const BwdConfig &config) {
  std::string why;
  BwdSelection selection = findInLibraries(config, &why);
  TORCH_CHECK(selection.bwd != nullptr, why);
  return selection;
}

std::vector<int64_t> servedHeads(const BwdConfig &config, int64_t most) {
  std::vector<LoadedLibrary> libraries = kernelLibraries();
  std::vector<int64_t> heads;
  BwdConfig each = config;
  for (int64_t h = 1; h <= most; ++h) {
    each.n.H = h;
    for (const LoadedLibrary &library : libraries)
      if (findBwd(*library.library, each, 1)) {
        heads.push_back(h);
        break;
      }
  }
  return heads;
}

Choice &lastChoice() {
  thread_local Choice choice;
  return choice;
}

} // namespace smla::ext
