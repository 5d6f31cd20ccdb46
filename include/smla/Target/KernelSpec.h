//===- KernelSpec.h - one AOT kernel configuration --------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// smla-compile turns a configuration string such as
//   d=512,dt=64,heads=16,groups=1,block=64,lse=base2,positions=1,dq=bf16,dkv=bf16
// into an smla.sparse_attention_bwd function, compiles it, and describes
// the resulting kernels in the manifest (runtime/MANIFEST.md).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_TARGET_KERNELSPEC_H
#define SMLA_TARGET_KERNELSPEC_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::smla {

struct KernelSpec {
  int64_t d = 512, dt = 64, heads = 16, groups = 1, block = 64;
  bool lseBase2 = true, positions = false, dqF32 = false, dkvF32 = false;
  /// Blocks the heads of one group are split into (one CTA each); 0 until
  /// parsed, then the value given or autoHeadBlocks(heads / groups).
  int64_t headBlocks = 0;
  /// Rows per CTA the auto split aims for: one m16 mma tile. Measured on
  /// the H200 against larger blocks at the same (row, slot) count: H=32 as
  /// 2 x 16 1.29x, H=64 as 4 x 16 1.71x, H=128 as 8 x 16 1.72x faster
  /// (docs/performance.md, fifth session).
  static constexpr int64_t kHeadsPerBlock = 16;
  /// The most heads one CTA can hold (its dQ accumulator and score tiles
  /// must fit in shared memory).
  static constexpr int64_t kMaxHeadsPerBlock = 64;
  /// The fewest blocks that divide `hg` heads into at most kHeadsPerBlock
  /// each, unless that leaves fewer than 8 (a prime hg such as 17): then the
  /// fewest that leave at most kMaxHeadsPerBlock.
  static int64_t autoHeadBlocks(int64_t hg);
  // No sm_scale: it is the bwd kernel's run-time f32 `sm_scale` parameter.
  /// A symbol-safe name, e.g. smla_d512_dt64_h16_g1_b64_base2_pos_bf16_bf16
  /// (with `_s2` after the block for two head blocks per group).
  std::string name() const;
  /// The function holding the whole op, in MLIR text.
  std::string source() const;
  /// The "config" object of a manifest entry.
  llvm::json::Object manifestConfig() const;
};

/// Parses `key=value,...`; on error returns std::nullopt and sets `error`
/// to a message naming the offending key.
std::optional<KernelSpec> parseKernelSpec(llvm::StringRef text,
                                          std::string &error);

/// What smla-compile records about one gpu.func before it is lowered.
struct KernelInfo {
  std::string entry, kind;
  std::vector<std::string> params, grid;
  /// Manifest type of each parameter: "ptr", "i32" or "f32".
  std::vector<std::string> paramTypes;
  int64_t threads = 0, dynamicSmem = 0;
};

/// The kernels of the `gpu.module`s in `module`, from the attributes
/// smla-gpu-map and smla-allocate-smem put on each gpu.func.
std::vector<KernelInfo> collectKernelInfo(ModuleOp module);

/// The PTX text of the first gpu.binary in `module` (format=isa).
std::optional<std::string> extractPtx(ModuleOp module);

/// Per-entry resource usage parsed from `ptxas -v`.
struct PtxasUsage {
  std::string entry;
  int64_t registers = -1, spillStores = -1, spillLoads = -1, stackFrame = -1;
};
std::vector<PtxasUsage> parsePtxasReport(llvm::StringRef log);

/// Runs `ptxas -arch=sm_90a -v ptx -o cubin`; returns its stderr+stdout in
/// `log`, false (with `log` explaining) on failure.
bool runPtxas(llvm::StringRef ptxas, llvm::StringRef ptxPath,
              llvm::StringRef cubinPath, std::string &log);

/// Lower-case hex SHA-256 of `bytes`.
std::string sha256Hex(llvm::StringRef bytes);

} // namespace mlir::smla

#endif // SMLA_TARGET_KERNELSPEC_H
