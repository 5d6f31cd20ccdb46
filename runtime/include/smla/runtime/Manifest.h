//===- Manifest.h - The compiler's kernel manifest, version 1 ---*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// The manifest is the artifact between the compiler and the runtime: for each
// kernel, its cubin and digest, the configuration it was compiled for, its
// launch geometry as rules over run-time sizes, and its parameter layout.
// runtime/MANIFEST.md specifies the format; Manifest::parse enforces it.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_RUNTIME_MANIFEST_H
#define SMLA_RUNTIME_MANIFEST_H

#include "smla/runtime/Json.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smla::runtime {

/// The run-time sizes a grid rule may refer to (names as in the manifest).
struct GridSizes {
  int64_t T = 0;    // query tokens
  int64_t S_kv = 0; // keys
  int64_t K = 0;    // topk
  int64_t H = 0;    // heads
  int64_t G = 0;    // kv groups
};

/// One grid dimension: an integer, a variable, or ceil_div(variable, integer).
class GridExpr {
public:
  enum class Kind { Constant, Variable, CeilDiv };
  enum class Var { T, S_kv, K, H, G };

  /// Parses the string form; returns nullopt and sets `error` on bad syntax.
  static std::optional<GridExpr> parse(std::string_view text,
                                       std::string &error);
  static GridExpr constant(int64_t value);

  Kind kind() const { return kind_; }
  /// The value for `sizes`; throws Error if a size it reads is negative.
  int64_t evaluate(const GridSizes &sizes) const;
  /// The canonical text, e.g. "ceil_div(T, 64)".
  std::string str() const;

private:
  Kind kind_ = Kind::Constant;
  Var var_ = Var::T;
  int64_t value_ = 1; // the constant, or the divisor of ceil_div
};

/// How a natural-log or base-2 lse is interpreted by the kernel.
enum class LseBase { Two, E };

/// The configuration a kernel was compiled for. An absent field (allowed only
/// for kinds other than "bwd") means the kernel serves any value of it.
struct KernelConfig {
  std::optional<int64_t> d, dt, heads, groups, block;
  /// Query tokens folded into one CTA (key sharing; absent: 1). `heads`
  /// then counts the rows of all of them.
  std::optional<int64_t> tokens;
  std::optional<LseBase> lseBase;
  std::optional<bool> positions;
  std::optional<std::string> dqType, dkvType;

  /// "d=512 dt=64 h=16 g=1 lse_base=2 positions=1 block=64 dq_type=bf16
  /// dkv_type=f32", leaving out absent fields.
  std::string str() const;
};

enum class ParamType { Ptr, I32, I64, F32 };
/// "ptr", "i32", "i64" or "f32".
const char *paramTypeName(ParamType type);
/// The size (and alignment) of a parameter of this type in the kernel's
/// parameter buffer.
size_t paramTypeSize(ParamType type);

struct ParamSpec {
  std::string name;
  ParamType type;
};

struct LaunchSpec {
  std::array<unsigned, 3> block{1, 1, 1};
  std::array<GridExpr, 3> grid;
  unsigned dynamicSmem = 0;
};

struct KernelEntry {
  std::string name;
  std::string kind;   // "bwd", "delta", "dkv_cast", ...
  std::string cubin;  // path relative to the manifest's directory
  std::string sha256; // lowercase hex
  std::string entry;  // the symbol inside the cubin
  KernelConfig config;
  LaunchSpec launch;
  std::vector<ParamSpec> params;
  /// Provenance (optional keys; empty when absent): the compiler that
  /// built the kernel, e.g. "smla-compile 0f400e9", and the configuration
  /// it was given, e.g. "d=512,dt=64,heads=16,...".
  std::string compiler, spec;

  /// "kernel 'NAME' (CONFIG)", the subject of every message about it.
  std::string describe() const;
};

/// What a caller asks for; every field must match the kernel's config.
struct KernelRequest {
  std::string kind = "bwd";
  int64_t d = 512, dt = 64, heads = 16, groups = 1;
  LseBase lseBase = LseBase::Two;
  bool positions = false;
  std::string dqType = "bf16", dkvType = "f32";
  std::optional<int64_t> block; // nullopt: any block size
  /// Folded tokens per CTA; a kernel without the field has 1.
  int64_t tokens = 1;

  /// "kind=bwd d=512 dt=64 h=16 g=1 lse_base=2 positions=0 dq_type=bf16
  /// dkv_type=f32".
  std::string str() const;
};

struct Manifest {
  static constexpr int kVersion = 1;

  int version = kVersion;
  std::string target;
  std::vector<KernelEntry> kernels;

  /// Parses and validates manifest text; throws Error naming the kernel, the
  /// key and the line:column of what is wrong.
  static Manifest parse(std::string_view text);

  /// The kernel named `name`, or nullptr.
  const KernelEntry *find(std::string_view name) const;

  /// The first kernel (in manifest order) whose config matches `request`,
  /// or nullptr. Builds no strings: the per-call path of optional kinds.
  const KernelEntry *match(const KernelRequest &request) const;

  /// `match`, but throws Error listing the request and the closest
  /// variants (how each differs) if no kernel matches.
  const KernelEntry &select(const KernelRequest &request) const;

  /// Why the kernels of this manifest (compiled for `target`, e.g.
  /// "sm_90a") cannot run on a device of compute capability major.minor,
  /// naming both; "" when they can. An "a" target (architecture-specific
  /// features) runs on exactly its own capability, any other on the same
  /// major version and a minor version at least its own.
  std::string deviceMismatch(int major, int minor) const;
};

/// Throws Error naming the kernel and both digests unless sha256(`cubin`)
/// equals `kernel.sha256`.
void verifyCubin(const KernelEntry &kernel, std::string_view cubin);

} // namespace smla::runtime

#endif // SMLA_RUNTIME_MANIFEST_H
