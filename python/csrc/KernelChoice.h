//===- KernelChoice.h - The kernels a call runs, and why --------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// The op runs the first library (KernelDirectory.h) that has a one-token
// bwd kernel for the call's configuration, and takes every other kernel it
// launches (pairs, the pair union, delta, the dkv cast) from that library.
// Every kernel it asks for takes a base-2 lse (the public op converts a
// natural-log one). A bwd kernel accumulates dkv in fp32 whatever its dkv
// type, so one compiled for either dkv type serves both. smla/_library.py
// plans a call's head count with the same lookup (find_kernel,
// served_heads: the library's head count, or a larger one with padded
// heads). Each call records what it chose (kernel, token pairing, slot
// walk) for smla's debug log.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_KERNELCHOICE_H
#define SMLA_PYTHON_KERNELCHOICE_H

#include "LaunchArgs.h"
#include "KernelDirectory.h"

#include <string>
#include <vector>

namespace smla::ext {

/// What a call's kernels must have been compiled for.
struct BwdConfig {
  BwdSizes n;
  bool positions = false;
  at::ScalarType dqDtype = at::kBFloat16, dkvDtype = at::kBFloat16;
};

/// The request for a kernel of `kind` for `config`.
runtime::KernelRequest makeRequest(const char *kind, const BwdConfig &config);

/// A bwd kernel of `library` for `tokens` folded tokens (config.n.H heads
/// each): the requested dq and dkv types, else the requested dq type with
/// the other dkv type; null if it has none.
const runtime::KernelEntry *findBwd(const runtime::KernelLibrary &library,
                                    const BwdConfig &config, int64_t tokens);

/// The smla-compile configuration that builds the bwd kernel for
/// `config`, e.g. "d=512,dt=64,heads=8,groups=1,lse=base2,positions=1,
/// dq=bf16,dkv=bf16".
std::string compileConfig(const BwdConfig &config);

struct BwdSelection {
  LoadedLibrary library;
  const runtime::KernelEntry *bwd = nullptr;
};

/// The first library with a one-token bwd kernel for `config`, or none
/// (bwd null) with `why` set to the closest variants of the primary
/// library and how to build the missing one.
BwdSelection findInLibraries(const BwdConfig &config, std::string *why);

/// findInLibraries, throwing `why` when none has one.
BwdSelection selectBwd(const BwdConfig &config);

/// The head counts (1 to `most`) for which some library has a one-token
/// bwd kernel of `config` but its heads, in ascending order.
std::vector<int64_t> servedHeads(const BwdConfig &config, int64_t most);

/// What the last call on this thread ran.
struct Choice {
  std::string kernel, directory, pairs, walk;
};
Choice &lastChoice();

} // namespace smla::ext

#endif // SMLA_PYTHON_KERNELCHOICE_H
