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
  /// Blocks the heads of one group are split into (one CTA each); 0 when
  /// not given: smla-compile then picks one of headBlockCandidates().
  int64_t headBlocks = 0;
  /// Query tokens folded into one step (ConfigAttr `tokens`): with 2, the
  /// kernel takes q/o/dout/lse/dq as [T/2, heads, ...] (heads = both
  /// tokens' rows) and indices/positions per token, and walks aligned
  /// index rows of token pairs (key sharing).
  int64_t tokens = 1;
  /// The split counts smla-compile tries when none is given, fewest blocks
  /// first: every n dividing hg = heads / groups with min(16, hg) <=
  /// hg / n <= 64 (a block never drops below one m16 mma tile of heads;
  /// 64 heads is the most whose tiles fit). smla-compile keeps the first
  /// whose bwd kernel stages both the q and the do rows in shared memory,
  /// else the last. Measured on the H200: a CTA that stages both is worth
  /// 1.3-1.7x, and among those the one with more heads per CTA wins (fewer
  /// dKV reductions): H=64 as 2 x 32 heads at block 32 is 1.37x over
  /// 4 x 16 at block 64 (`bench/bench_bwd.py --shapes B1`). A hg with
  /// no such divisor (a prime above 64) keeps the fewest blocks of at most
  /// 64 heads.
  std::vector<int64_t> headBlockCandidates() const;
  static constexpr int64_t kMinHeadsPerBlock = 16, kMaxHeadsPerBlock = 64;
  /// Threads per bwd CTA and the CTAs per SM its shared memory and
  /// registers leave room for (keys `threads`, `ctas_per_sm`); 0: the
  /// smla-compile defaults (--cta-threads, --ctas-per-sm). Not part of the
  /// name: one library holds one variant of each configuration.
  int64_t threads = 0, ctasPerSm = 0;
  /// Key `scatter`: `wgmma` runs the dKV scatter of a 32-row CTA at block
  /// 64 on 512 threads on wgmma, deferred in column chunks over the next
  /// block (smla-defer-scatter); `mma` (the default) keeps it on mma.sync.
  /// Not part of the name either.
  bool wgmmaScatter = false;
  /// Key `cluster` (with scatter=wgmma and an even number of head blocks
  /// per token): run head blocks hb and hb ^ 1 of a token as a cluster of
  /// two CTAs that split the dKV columns (docs/wgmma-kernels.md). Not part of
  /// the name either; the manifest's config records it (`"cluster": true`).
  bool cluster = false;
  /// Key `epilogue` (`cta`, the default, or `fused`; with scatter=wgmma):
  /// `fused` runs softmax, dS and the pack in the block products'
  /// warpgroup, in its wgmma accumulators (smla-defer-scatter's
  /// fuse-epilogue). Not part of the name; the manifest's config records
  /// it (`"epilogue": "fused"`).
  bool fusedEpilogue = false;
  /// Key `epilogue=overlap`: `fused`, plus the step's last dKV chunk run
  /// by warpgroups 1-3 while warpgroup 0 runs the fused epilogue
  /// (smla-defer-scatter's overlap-chunks; the manifest records
  /// `"epilogue": "overlap"`): overlapChunks = 1.
  /// Key `overlap_chunks` (1 or 2, with epilogue=overlap): how many of the
  /// step's last dKV chunks run alongside (recorded in the manifest when
  /// 2). 0: no overlap.
  int64_t overlapChunks = 0;
  /// Key `schedule` (`cta`, the default, or `warp_specialized`): with
  /// `warp_specialized` the bwd kernel's block loop runs as three
  /// warpgroup roles (smla-schedule-warp-specialized, docs/schedule.md):
  /// 384 threads, 64 heads per CTA (head_blocks = heads / groups / 64),
  /// blocks of 64 keys. The manifest's config records it.
  bool warpSpecialized = false;
  /// Keys `softmax_chunks` and `dkv_depth` (with warp_specialized): the
  /// schedule's split of the dKV chunks between the consumer roles and the
  /// dkv role's chunks in flight (smla-schedule-warp-specialized's
  /// options); -1 / 0: its defaults. Recorded in the manifest when set.
  int64_t softmaxChunks = -1, dkvDepth = 0;
  /// Key `max_spill`: bytes of register spill (stores, and loads) that
  /// smla-compile accepts for this configuration's kernels (default 0: a
  /// kernel that spills is refused; at most 512). Recorded in the manifest
  /// when set.
  int64_t maxSpillBytes = 0;
  // No sm_scale: it is the bwd kernel's run-time f32 `sm_scale` parameter.
  /// A symbol-safe name, e.g. smla_d512_dt64_h16_g1_b64_base2_pos_bf16_bf16
  /// (with `_s2` after the block for two head blocks per group, `_t2`
  /// for two folded tokens).
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
  /// The tensors whose rows the kernel stages in shared memory
  /// (`smla.staged`, set by smla-gpu-map): "q", "do", both or none.
  std::vector<std::string> staged;
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

/// `ptx` with `.minnctapersm ctas` added to the directives of `entry` (after
/// its `.maxntid`), which makes ptxas cap the entry's registers so that
/// `ctas` CTAs fit in one SM; nullopt if the entry or its `.maxntid` is not
/// found. (`--maxrregcount` does not apply to entries with `.maxntid`.)
std::optional<std::string> withMinCtasPerSm(llvm::StringRef ptx,
                                            llvm::StringRef entry,
                                            int64_t ctas);

/// Lower-case hex SHA-256 of `bytes`.
std::string sha256Hex(llvm::StringRef bytes);

} // namespace mlir::smla

#endif // SMLA_TARGET_KERNELSPEC_H
