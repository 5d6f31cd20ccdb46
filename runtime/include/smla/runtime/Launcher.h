//===- Launcher.h - Loading and launching the compiled kernels --*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// KernelLibrary owns a manifest and its cubins (verified against the manifest's
// digests when the library is opened). A kernel's module is loaded the first
// time it is used in a CUDA context and cached per (context, cubin); the
// CUfunction is cached per (context, kernel). Launches go through
// cuLaunchKernelEx on the caller's stream, with the parameter buffer built
// from the manifest's layout and the grid from its rules. All methods are
// thread-safe.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_RUNTIME_LAUNCHER_H
#define SMLA_RUNTIME_LAUNCHER_H

#include "smla/runtime/Driver.h"
#include "smla/runtime/Manifest.h"

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace smla::runtime {

/// One kernel argument, tagged with its type.
class ParamValue {
public:
  static ParamValue ptr(CUdeviceptr address);
  static ParamValue ptr(const void *address);
  static ParamValue i32(int32_t value);
  static ParamValue i64(int64_t value);
  static ParamValue f32(float value);

  ParamType type() const { return type_; }
  uint64_t bits() const { return bits_; }

private:
  ParamType type_ = ParamType::I64;
  uint64_t bits_ = 0; // the value's bytes, zero-extended
};

/// Arguments by parameter name; names the kernel does not take are ignored,
/// so one map can serve several kernels.
using ParamValues = std::map<std::string, ParamValue, std::less<>>;

/// A kernel's parameter buffer: each parameter at an offset aligned to its
/// size, as the CUDA ABI lays out kernel parameters.
class PackedParams {
public:
  /// Bytes up to the end of the last parameter.
  size_t size() const { return size_; }
  const std::vector<size_t> &offsets() const { return offsets_; }
  const uint8_t *bytes() const {
    return reinterpret_cast<const uint8_t *>(storage_.data());
  }
  /// One pointer per parameter into the buffer, for cuLaunchKernelEx. Valid
  /// until this object is modified or destroyed.
  void **kernelParams();

private:
  friend PackedParams packParams(const KernelEntry &, const ParamValues &);
  std::vector<uint64_t> storage_; // 8-byte aligned backing store
  std::vector<size_t> offsets_;
  std::vector<void *> pointers_;
  size_t size_ = 0;
};

/// Lays out `values` as `kernel` takes them. Integers convert between i32 and
/// i64 when the value fits; otherwise the type must match. Throws Error
/// naming the kernel and the parameter for a missing or mistyped value.
PackedParams packParams(const KernelEntry &kernel, const ParamValues &values);

struct LaunchGeometry {
  std::array<unsigned, 3> grid{0, 0, 0};
  std::array<unsigned, 3> block{1, 1, 1};
  unsigned dynamicSmem = 0;
  /// A grid with no blocks (e.g. T == 0); launching it is a no-op.
  bool empty() const { return grid[0] == 0 || grid[1] == 0 || grid[2] == 0; }
};

/// Evaluates `kernel`'s grid rules for `sizes`. Throws Error naming the kernel
/// for a negative size or a grid beyond the hardware limits.
LaunchGeometry launchGeometry(const KernelEntry &kernel,
                              const GridSizes &sizes);

/// Kernels smaller than this much dynamic shared memory need no opt-in.
inline constexpr unsigned kDefaultDynamicSmemLimit = 48 * 1024;

class KernelLibrary {
public:
  /// Reads DIR/manifest.json and the cubins it names, and verifies them.
  /// `driver` defaults to systemDriver(), resolved at first use; a driver
  /// passed here must outlive the library.
  static KernelLibrary fromDirectory(const std::string &directory,
                                     const DriverApi *driver = nullptr);
  /// The same from memory (e.g. kernels embedded in the binary): `cubins`
  /// maps each manifest "cubin" value to the cubin's bytes.
  static KernelLibrary fromMemory(std::string_view manifestText,
                                  std::map<std::string, std::string> cubins,
                                  const DriverApi *driver = nullptr);

  KernelLibrary(KernelLibrary &&) noexcept;
  KernelLibrary &operator=(KernelLibrary &&) noexcept;
  /// Unloads every module this library loaded (errors ignored).
  ~KernelLibrary();

  const Manifest &manifest() const;
  /// Manifest::select on this library's manifest.
  const KernelEntry &select(const KernelRequest &request) const;
  /// Manifest::match on this library's manifest (nullptr if none matches).
  const KernelEntry *match(const KernelRequest &request) const;
  /// The kernel named `name`; throws Error listing the names if absent.
  const KernelEntry &kernel(std::string_view name) const;

  /// The kernel's function in the current CUDA context, loading its module on
  /// first use. With no current context, makes device 0's primary context
  /// current. `kernel` must come from this library's manifest.
  CUfunction function(const KernelEntry &kernel);

  /// Launches `kernel` on `stream` in the current context. Argument errors
  /// (sizes, values) are reported before any driver call, and a launch with
  /// an empty grid does nothing. Asynchronous: kernel faults surface on the
  /// stream, not here.
  void launch(const KernelEntry &kernel, CUstream stream,
              const GridSizes &sizes, const ParamValues &values);

  /// Number of modules loaded so far, over all contexts.
  size_t loadedModuleCount() const;

private:
  struct State;
  explicit KernelLibrary(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

} // namespace smla::runtime

#endif // SMLA_RUNTIME_LAUNCHER_H
