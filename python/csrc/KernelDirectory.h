//===- KernelDirectory.h - Finding and caching the kernels ------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// The op loads the compiler's manifest.json + cubins from the first of
//   1. the environment variable SMLA_KERNEL_DIR, if set and non-empty;
//   2. the directory kernels/ next to this module (smla/kernels, filled at
//      install time by -DSMLA_KERNEL_DIR=path, or a symlink in place builds).
// The library is opened once per process, on the first call that needs a
// kernel; a failure is not cached, so fixing the directory and calling again
// works.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_KERNELDIRECTORY_H
#define SMLA_PYTHON_KERNELDIRECTORY_H

#include "smla/runtime/Launcher.h"

#include <string>

namespace smla::ext {

/// The directory the kernels are (or would be) loaded from, by the rules
/// above. Does not check that it exists.
std::string kernelDirectory();

/// The process-wide kernel library, opened from kernelDirectory() on the first
/// call. Thread-safe. Throws smla::runtime::Error (naming the directory and
/// how it was chosen) if it cannot be opened.
runtime::KernelLibrary &kernelLibrary();

/// Whether `entry` has a parameter called `name` (kernels built before a
/// parameter existed lack it).
bool takesParam(const runtime::KernelEntry &entry, const char *name);

} // namespace smla::ext

#endif // SMLA_PYTHON_KERNELDIRECTORY_H
