//===- GpuSmokeTest.cpp - Load and launch a real cubin on a GPU -----------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// End-to-end check of the runtime against the real driver: writes a manifest
// for SmokeKernel.cu's cubin, opens it with KernelLibrary::fromDirectory,
// launches it through the manifest's grid rule and parameter layout, and
// checks every output. Exits 77 (CTest's skip code) without a driver or GPU.
//
//   smla_runtime_gpu_smoke <smoke.cubin> [output-directory]
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Error.h"
#include "smla/runtime/Launcher.h"
#include "smla/runtime/Sha256.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

using namespace smla::runtime;

namespace {

constexpr int kSkip = 77;

// Memory management is not part of the runtime; the test resolves it itself.
struct Memory {
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*copyToHost)(void *, CUdeviceptr, size_t);
};

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string manifestFor(const std::string &cubin) {
  return R"j({
  "format": "smla-manifest",
  "version": 1,
  "target": "sm_90a",
  "kernels": [{
    "name": "smla_smoke",
    "kind": "smoke",
    "cubin": "smoke.cubin",
    "sha256": ")j" +
         sha256Hex(cubin) + R"j(",
    "entry": "smla_smoke_kernel",
    "config": {"d": 1},
    "launch": {"block": [128, 1, 1], "grid": ["ceil_div(T, 128)", "G", 1],
               "dynamic_smem": 98304},
    "params": [{"name": "out", "type": "ptr"}, {"name": "T", "type": "i32"},
               {"name": "scale", "type": "f32"}, {"name": "bias", "type": "i64"}]
  }]
})j";
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::cerr << "usage: smla_runtime_gpu_smoke <smoke.cubin> [out-dir]\n";
    return 2;
  }
  void *cuda = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    std::cout << "SKIP: " << kDriverLibrary << " not found\n";
    return kSkip;
  }
  try {
    systemDriver();
  } catch (const Error &error) {
    std::cout << "SKIP: " << error.what() << "\n";
    return kSkip;
  }
  Memory memory;
  memory.alloc =
      reinterpret_cast<decltype(memory.alloc)>(dlsym(cuda, "cuMemAlloc_v2"));
  memory.free =
      reinterpret_cast<decltype(memory.free)>(dlsym(cuda, "cuMemFree_v2"));
  memory.copyToHost = reinterpret_cast<decltype(memory.copyToHost)>(
      dlsym(cuda, "cuMemcpyDtoH_v2"));
  auto ctxSynchronize =
      reinterpret_cast<CUresult (*)()>(dlsym(cuda, "cuCtxSynchronize"));

  std::string directory = argc > 2 ? argv[2] : "smla-smoke-kernels";
  mkdir(directory.c_str(), 0755);
  std::string cubin = readFile(argv[1]);
  std::ofstream(directory + "/smoke.cubin", std::ios::binary) << cubin;
  std::ofstream(directory + "/manifest.json") << manifestFor(cubin);

  const int T = 1000, G = 3;
  const float scale = 0.5f;
  const long long bias = 7;
  try {
    KernelLibrary library = KernelLibrary::fromDirectory(directory);
    const KernelEntry &kernel = library.kernel("smla_smoke");
    // The first launch creates device 0's primary context.
    library.function(kernel);
    CUdeviceptr out = 0;
    if (memory.alloc(&out, sizeof(float) * T * G) != CUDA_SUCCESS) {
      std::cout << "FAIL: cuMemAlloc\n";
      return 1;
    }
    GridSizes sizes;
    sizes.T = T;
    sizes.G = G;
    library.launch(kernel, nullptr, sizes,
                   {{"out", ParamValue::ptr(out)},
                    {"T", ParamValue::i64(T)},
                    {"scale", ParamValue::f32(scale)},
                    {"bias", ParamValue::i64(bias)}});
    if (CUresult result = ctxSynchronize(); result != CUDA_SUCCESS) {
      std::cout << "FAIL: cuCtxSynchronize: "
                << cudaErrorText(systemDriver(), result) << "\n";
      return 1;
    }
    std::vector<float> host(T * G);
    memory.copyToHost(host.data(), out, sizeof(float) * T * G);
    memory.free(out);
    int wrong = 0;
    for (int y = 0; y < G; ++y)
      for (int i = 0; i < T; ++i) {
        float expected = scale * i + float(bias) + y;
        if (std::fabs(host[y * T + i] - expected) > 1e-3f && wrong++ < 5)
          std::cout << "out[" << y << "][" << i << "] = " << host[y * T + i]
                    << ", expected " << expected << "\n";
      }
    // A wrong-image error must carry the driver's name for it.
    std::string corrupt = cubin.substr(0, 64);
    std::string manifest = manifestFor(corrupt);
    KernelLibrary bad =
        KernelLibrary::fromMemory(manifest, {{"smoke.cubin", corrupt}});
    try {
      bad.function(bad.kernel("smla_smoke"));
      std::cout << "FAIL: a truncated cubin loaded\n";
      return 1;
    } catch (const Error &error) {
      std::cout << "truncated cubin: " << error.what() << "\n";
    }
    if (wrong) {
      std::cout << "FAIL: " << wrong << " wrong outputs\n";
      return 1;
    }
  } catch (const Error &error) {
    std::cout << "FAIL: " << error.what() << "\n";
    return 1;
  }
  std::cout << "PASS: launched smla_smoke_kernel on a " << T << "x" << G
            << " grid through the manifest\n";
  return 0;
}
