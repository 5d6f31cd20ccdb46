//===- KernelDirectory.h - Finding and caching the kernels ------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// The op selects its kernels from these libraries, in order:
//   1. the one in the kernel directory: smla.config.kernel_dir
//      (SMLA_KERNEL_DIR, read by smla.config at import and on
//      smla.reload_config(), and handed over with setKernelDirectory) if
//      set, else the package's kernels/ directory, which smla._compiled
//      registers when it loads the module (setPackageKernelDirectory; a
//      module imported on its own takes kernels/ next to itself);
//   2. those added with addKernelDirectory: kernels compiled on first use
//      into the cache (smla/_library.py).
// A changed kernel directory applies from the next call (a directory that
// cannot be opened is then an error naming it). Every library opened
// stays loaded for the process: kernels launched from it may still be
// running. Opening is not cached when it fails, so fixing the directory
// and calling again works. Nothing here reads the environment.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_KERNELDIRECTORY_H
#define SMLA_PYTHON_KERNELDIRECTORY_H

#include "smla/runtime/Launcher.h"

#include <string>
#include <vector>

namespace smla::ext {

/// The package's kernels/ directory (where the installed package's library
/// is), used when no kernel directory is set.
void setPackageKernelDirectory(const std::string &directory);

/// The kernel directory (an absolute path) that replaces the package's;
/// "" for the package's.
void setKernelDirectory(const std::string &directory);

/// The directory the primary library is (or would be) loaded from, by the
/// rules above, as an absolute path. Does not check that it exists.
std::string kernelDirectory();

/// The primary library (kernelDirectory()), opened on first use. Thread
/// safe. Throws smla::runtime::Error naming the directory and how it was
/// chosen if it cannot be opened.
runtime::KernelLibrary &kernelLibrary();

/// Opens the library in `directory` (an absolute path) and appends it to
/// those every call selects from after the primary one; a directory added
/// before is not added again.
void addKernelDirectory(const std::string &directory);

/// One library and the directory it was read from.
struct LoadedLibrary {
  runtime::KernelLibrary *library;
  std::string directory;
};

/// The primary library, then the added ones.
std::vector<LoadedLibrary> kernelLibraries();

/// Throws (TORCH_CHECK) naming the device, its compute capability and the
/// library's target when the kernels of `library` cannot run on CUDA
/// device `device`. Remembers the answer per library and device.
void checkDeviceTarget(const LoadedLibrary &library, int device);

/// Whether `entry` has a parameter called `name` (kernels built before a
/// parameter existed lack it).
bool takesParam(const runtime::KernelEntry &entry, const char *name);

} // namespace smla::ext

#endif // SMLA_PYTHON_KERNELDIRECTORY_H
