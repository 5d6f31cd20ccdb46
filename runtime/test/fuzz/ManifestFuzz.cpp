//===- ManifestFuzz.cpp - libFuzzer target for the manifest reader --------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Feeds arbitrary bytes to every parser the runtime has: the JSON reader,
// the manifest reader on top of it (Manifest::parse) and the grid-rule
// parser (GridExpr::parse). Built with clang's -fsanitize=fuzzer,address,
// undefined by scripts/fuzz-runtime.sh, which runs it for a fixed time in
// the test command. Besides memory errors and undefined behaviour, it
// checks what a manifest that parses promises the loader:
//   - every cubin is a plain file name in the manifest's directory;
//   - kernel names are unique and the block sizes within the hardware's;
//   - a grid rule prints in a form that parses back to the same rule;
//   - selecting a kernel either returns one of the manifest's or throws
//     Error, and agrees with Manifest::match.
// Any other exception type, or a broken promise, aborts.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Error.h"
#include "smla/runtime/Json.h"
#include "smla/runtime/LibraryFiles.h"
#include "smla/runtime/Manifest.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

using namespace smla::runtime;

namespace {

[[noreturn]] void broken(const char *promise) {
  std::fprintf(stderr, "smla manifest fuzz: broken promise: %s\n", promise);
  std::abort();
}

void checkGridRule(const GridExpr &expr) {
  std::string error;
  std::optional<GridExpr> again = GridExpr::parse(expr.str(), error);
  if (!again || again->str() != expr.str())
    broken("a grid rule prints as text that parses back to it");
}

void checkManifest(const Manifest &manifest) {
  std::set<std::string> names;
  for (const KernelEntry &kernel : manifest.kernels) {
    if (!isPlainFileName(kernel.cubin))
      broken("cubins are plain file names");
    if (!names.insert(kernel.name).second)
      broken("kernel names are unique");
    uint64_t threads = 1;
    for (unsigned b : kernel.launch.block)
      threads *= b;
    if (threads < 1 || threads > 1024)
      broken("a block has 1 to 1024 threads");
    for (const GridExpr &expr : kernel.launch.grid)
      checkGridRule(expr);
  }
  for (const char *kind : {"bwd", "dkv_cast"}) {
    KernelRequest request;
    request.kind = kind;
    const KernelEntry *matched = manifest.match(request);
    try {
      const KernelEntry &selected = manifest.select(request);
      if (&selected != matched)
        broken("select returns what match finds");
    } catch (const Error &) {
      if (matched != nullptr)
        broken("select throws only when match finds nothing");
    }
  }
  (void)manifest.deviceMismatch(9, 0);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  try {
    checkManifest(Manifest::parse(text));
  } catch (const Error &) {
    // A refused manifest: the expected outcome for most inputs.
  }
  std::string error;
  if (std::optional<GridExpr> expr = GridExpr::parse(text, error))
    checkGridRule(*expr);
  return 0;
}
