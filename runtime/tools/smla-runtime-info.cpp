//===- smla-runtime-info.cpp - Inspect and check a kernel directory -------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Prints the kernels of a manifest and verifies every cubin's sha256; with
// --load, also loads each kernel into device 0's primary context, which checks
// on a GPU machine that the cubins suit the device and the driver.
//
//   smla-runtime-info [--load] <kernel-directory | manifest.json>
//
// Exit status: 0 if everything checked is fine, 1 otherwise, 2 on bad usage.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Driver.h"
#include "smla/runtime/Error.h"
#include "smla/runtime/Launcher.h"
#include "smla/runtime/LibraryFiles.h"
#include "smla/runtime/Manifest.h"
#include "smla/runtime/Sha256.h"

#include <sys/stat.h>

#include <cstring>
#include <iostream>
#include <memory>

using namespace smla::runtime;

static void printKernel(const KernelEntry &kernel) {
  std::cout << kernel.name << "\n"
            << "  kind    " << kernel.kind << "\n"
            << "  entry   " << kernel.entry << "\n"
            << "  config  " << kernel.config.str() << "\n"
            << "  launch  grid (" << kernel.launch.grid[0].str() << ", "
            << kernel.launch.grid[1].str() << ", "
            << kernel.launch.grid[2].str() << ") block ("
            << kernel.launch.block[0] << ", " << kernel.launch.block[1] << ", "
            << kernel.launch.block[2] << ") dynamic smem "
            << kernel.launch.dynamicSmem << " B\n"
            << "  params ";
  for (const ParamSpec &param : kernel.params)
    std::cout << " " << param.name << ":" << paramTypeName(param.type);
  std::cout << "\n";
  if (!kernel.compiler.empty())
    std::cout << "  built   by " << kernel.compiler << " from --config "
              << kernel.spec << "\n";
}

int main(int argc, char **argv) {
  bool load = false;
  std::string target;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--load") == 0)
      load = true;
    else if (target.empty() && argv[i][0] != '-')
      target = argv[i];
    else
      target.clear(), argc = 0; // force the usage message
  }
  if (target.empty()) {
    std::cerr << "usage: smla-runtime-info [--load] <kernel-directory | "
                 "manifest.json>\n";
    return 2;
  }

  // A directory, or the path of a manifest file in one.
  struct stat info;
  std::string directory = target, manifestName = "manifest.json";
  if (stat(target.c_str(), &info) == 0 && !S_ISDIR(info.st_mode)) {
    size_t slash = target.rfind('/');
    directory = slash == std::string::npos ? "." : target.substr(0, slash);
    manifestName = target.substr(slash + 1);
  }
  std::unique_ptr<LibraryDirectory> dir;
  std::string text;
  try {
    dir = std::make_unique<LibraryDirectory>(directory);
    text = dir->read(manifestName, kMaxManifestBytes, "manifest");
  } catch (const Error &error) {
    std::cerr << error.what() << "\n";
    return 1;
  }
  const std::string manifestPath = dir->pathOf(manifestName);
  Manifest manifest;
  try {
    manifest = Manifest::parse(text);
  } catch (const Error &error) {
    std::cerr << error.what() << " [in " << manifestPath << "]\n";
    return 1;
  }
  std::cout << "manifest " << manifestPath << ": version " << manifest.version
            << ", target " << manifest.target << ", " << manifest.kernels.size()
            << " kernel(s)\n";

  int failures = 0;
  for (const KernelEntry &kernel : manifest.kernels) {
    printKernel(kernel);
    std::string cubin;
    std::cout << "  cubin   " << kernel.cubin << ": ";
    try {
      cubin = dir->read(kernel.cubin, kMaxCubinBytes, "the cubin");
    } catch (const Error &error) {
      std::cout << "UNREADABLE (" << error.what() << ")\n";
      ++failures;
      continue;
    }
    std::string actual = sha256Hex(cubin);
    if (actual == kernel.sha256) {
      std::cout << cubin.size() << " bytes, sha256 ok\n";
    } else {
      std::cout << "SHA256 MISMATCH: manifest " << kernel.sha256 << ", file "
                << actual << "\n";
      ++failures;
    }
  }
  if (failures) {
    std::cout << failures << " cubin(s) failed verification\n";
    return 1;
  }
  if (!load)
    return 0;

  try {
    KernelLibrary library = KernelLibrary::fromDirectory(directory);
    for (const KernelEntry &kernel : library.manifest().kernels) {
      library.function(kernel);
      CUdevice device = -1;
      const DriverApi &driver = systemDriver();
      driver.ctxGetDevice(&device);
      std::cout << "loaded " << kernel.name << " on device " << device << "\n";
    }
  } catch (const Error &error) {
    std::cout << error.what() << "\n";
    return 1;
  }
  return 0;
}
