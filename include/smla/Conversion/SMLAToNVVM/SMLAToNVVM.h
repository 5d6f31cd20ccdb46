//===- SMLAToNVVM.h - smla tile IR to CUDA kernels --------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// The GPU code generation path (docs/compiler.md): smla-gpu-map outlines the
// guarded loop nest into gpu.funcs, smla-allocate-smem places the scratch
// tiles in dynamic shared memory, smla-verify-smem proves no two live tiles
// share bytes, and smla-lower-to-nvvm turns each tile op into
// CTA-cooperative gpu/nvgpu/nvvm code.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATONVVM_SMLATONVVM_H
#define SMLA_CONVERSION_SMLATONVVM_SMLATONVVM_H

#include "smla/Dialect/SMLA/IR/SMLA.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/Pass.h"

namespace mlir::smla {

#define GEN_PASS_DECL_SMLAGPUMAP
#define GEN_PASS_DECL_SMLAPREFETCHKEYS
#define GEN_PASS_DECL_SMLADEFERSCATTER
#define GEN_PASS_DECL_SMLAALLOCATESMEM
#define GEN_PASS_DECL_SMLAVERIFYSMEM
#define GEN_PASS_DECL_SMLALOWERTONVVM
#define GEN_PASS_DECL_SMLAINSERTBARRIERS
#include "smla/Conversion/Passes.h.inc"

/// Name of the `.extern .shared` buffer every kernel carves its tiles from.
constexpr llvm::StringLiteral kSmemGlobal = "smla_smem";
/// Kernel attributes read by smla-compile to write the manifest.
constexpr llvm::StringLiteral kDynamicSmemAttr = "smla.dynamic_smem";
constexpr llvm::StringLiteral kKernelKindAttr = "smla.kind";
/// The largest top-k the pair-union kernel's shared scratch holds (a hash
/// table of 4 x this many entries); larger calls get counts = -2.
constexpr int64_t kPairUnionMaxTopk = 2048;
constexpr llvm::StringLiteral kParamNamesAttr = "smla.params";
constexpr llvm::StringLiteral kGridAttr = "smla.grid";
/// On the bwd gpu.func: the tensors whose rows smla-gpu-map staged in shared
/// memory (["q", "do"], ["q"] or absent).
constexpr llvm::StringLiteral kStagedAttr = "smla.staged";
/// On the bwd gpu.func: the CTAs per SM it was mapped for (smla-gpu-map's
/// ctas-per-sm); with its thread count it bounds the registers per thread
/// that smla-lower-to-nvvm may plan for.
constexpr llvm::StringLiteral kCtasPerSmAttr = "smla.ctas_per_sm";
/// On the workgroup alloca of a dQ accumulator: smla-gpu-map planned it in
/// registers (the register form of LowerDqMma.cpp, this many column pairs
/// per warp), so smla-allocate-smem gives it no bytes; smla-lower-to-nvvm
/// keeps it in a private array per thread and erases the alloca.
constexpr llvm::StringLiteral kDqRegistersAttr = "smla.dq_registers";
/// The f32 kernel parameter holding the softmax scale. The `scale`
/// attributes of smla.softmax / smla.dscores (from the op's `sm_scale`) are
/// compile-time placeholders: in a kernel with this parameter the lowering
/// reads the scale from it instead (see runtimeScale).
constexpr llvm::StringLiteral kScaleParam = "sm_scale";
/// The i32 bwd kernel parameter setting the rotation of the top-k block
/// walk (rotateBlockWalk; <= 0: blocks in order).
constexpr llvm::StringLiteral kWalkParam = "walk_period";
/// Set on a gpu.func once smla-insert-barriers has placed its barriers.
constexpr llvm::StringLiteral kBarriersPlacedAttr = "smla.barriers_placed";
/// Largest dynamic shared memory one CTA may use on sm_90 (227 KiB).
constexpr int64_t kMaxDynamicSmem = 232448;
/// Shared memory of one sm_90 SM, and the part the system keeps per CTA.
constexpr int64_t kSmemPerSm = 233472;
constexpr int64_t kSmemReservedPerCta = 1024;
/// 32-bit registers of one sm_90 SM, and the most one thread may have.
constexpr int64_t kRegistersPerSm = 65536;
constexpr int64_t kMaxRegistersPerThread = 255;

/// A half-open interval of positions in a linear walk of a gpu.func body.
struct LiveRange {
  int64_t begin = 0, end = 0;
  bool overlaps(const LiveRange &o) const {
    return begin < o.end && o.begin < end;
  }
};

/// Live range of a buffer `buffer` (and of every view derived from it)
/// within `func`, with positions from `order` (pre-order walk numbering).
/// Conservative: any use inside a loop that the buffer is also used outside
/// of, or whose first use in the loop body may read it, covers the loop.
LiveRange computeLiveRange(Value buffer,
                           const llvm::DenseMap<Operation *, int64_t> &order);

/// Every op that touches `buffer`: its users, and transitively the users
/// of what side-effect-free users derive from it (views, addresses).
void collectUses(Value buffer, SmallVectorImpl<Operation *> &uses);

/// Pre-order numbering of every op nested in `root`, plus, for each op, the
/// number one past its last nested op (stored under the same key in `ends`).
void numberOps(Operation *root, llvm::DenseMap<Operation *, int64_t> &order,
               llvm::DenseMap<Operation *, int64_t> &ends);

/// Places a `gpu.barrier` between two tile ops of `func` wherever they touch
/// overlapping shared-memory bytes and one writes, unless the dependence
/// stays within one thread (smla-insert-barriers); idempotent.
void insertTileBarriers(gpu::GPUFuncOp func);

/// Makes the CTA walk the steps of `loop` (0 .. n in steps of 1, the top-k
/// block loop of a bwd kernel) starting at step
/// (cta * n / period) mod n and wrapping around; period <= 0 keeps the
/// order (BlockWalk.cpp says why). The start step is computed at `b`'s
/// insertion point, which must dominate `loop`.
LogicalResult rotateBlockWalk(OpBuilder &b, scf::ForOp loop, Value cta,
                              Value period);

/// Extra bf16 columns per row of a key tile or a staged q/do row in shared
/// memory (16 bytes: consecutive rows fall in different banks).
constexpr int64_t kKeyTilePad = 8;

/// smla-gpu-map's staging of the CTA's q and do rows in shared memory
/// (StageTokenRows.cpp): `tensors` are the kernel's tensor parameters by
/// role, `mapping` maps them to the kernel's views, `t`/`g` are the CTA's
/// token and head block, `headBlocks` the CTAs per token, and `budget`
/// the shared-memory bytes the staged rows and the tiles may use.
/// With `wgmma`, a 32-row CTA at block 64 stages q and do as one canonical
/// [q; do] tile for the wgmma form of scatter_dkv (canonicalRow); with
/// `cluster` too and an even number of head blocks per token, also the
/// partner head block's (g ^ 1) rows for this CTA's column half
/// (kPartnerRowsAttr).
void stageTokenRows(OpBuilder &b, Location loc, gpu::GPUFuncOp kernel,
                    ArrayRef<std::pair<StringRef, Value>> tensors,
                    IRMapping &mapping, Value t, Value g, int64_t threads,
                    int64_t headBlocks, int64_t budget, bool wgmma,
                    bool cluster);

/// Rows per half of the canonical [q; do] tile (the CTA's rows).
constexpr int64_t kCanonicalHalf = 32;
/// Bytes of one packed tile, dS^T or P^T ([64 slots][32 rows] bf16; P^T
/// follows dS^T), and of both, which a cluster's pack_dkv sends to its
/// partner (smla-defer-scatter).
constexpr int64_t kPackedTileBytes = 64 * kCanonicalHalf * 2;
constexpr int64_t kPartnerTileBytes = 2 * kPackedTileBytes;
/// Bytes between core-matrix columns (8 columns) of that 64-row tile.
constexpr int64_t kCanonicalStride = 2 * kCanonicalHalf / 8 * 128;
/// Marks a view of the canonical [q; do] tile with its first row (0: q,
/// 32: do).
constexpr llvm::StringLiteral kCanonicalRowAttr = "smla.canonical_row";
/// Marks the CTA index `t + g * T` that rotates the block walk
/// (BlockWalk.cpp): smla-defer-scatter's clusters make g even in it, so
/// that the two head blocks of a cluster walk their blocks in one order.
constexpr llvm::StringLiteral kWalkCtaAttr = "smla.walk_cta";
/// Marks the canonical [q'; do'] tile of the partner head block's rows for
/// this CTA's column half (StageTokenRows.cpp, smla-defer-scatter's
/// clusters).
constexpr llvm::StringLiteral kPartnerRowsAttr = "smla.partner_rows";
/// The first row of `memref` in the canonical [q; do] tile, if it is a
/// view of one.
std::optional<int64_t> canonicalRow(Value memref);
/// Marks the view of a key tile that smla-defer-scatter laid out for wgmma
/// with 128-byte swizzle (DeferScatter.cpp): slab c / 64 of 8 KB, key
/// group j / 8 of 1 KB in it, key j % 8 at 128 (j % 8), 16-byte chunk
/// (c % 64) / 8 at 16 (((c % 64) / 8) ^ (j % 8)).
constexpr llvm::StringLiteral kSwizzledKeysAttr = "smla.swizzled_keys";
bool swizzledKeys(Value memref);
/// Bytes of one 64-column slab of a swizzled 64-key tile.
constexpr int64_t kSwizzleSlab = 64 * 128;
/// Marks the ops of one step that smla-defer-scatter fused into the block
/// products' warpgroup (fuseEpilogue, DeferScatter.cpp): the wgmma pair of
/// tile_dots, the softmax and dscores on their S and dP tiles, and the
/// pack_dkv that reads them, in that order. The lowering emits the run at
/// its first tile_dot with S and dP in that warpgroup's accumulator
/// registers (the tiles are not touched), and smla-insert-barriers sees
/// the run as one op at that place (or at the first chunk that runs
/// alongside it, kOverlapRunAttr). The gpu.func of such a run carries
/// the mark too (smla-compile checks that epilogue=fused fused something).
constexpr llvm::StringLiteral kFusedEpilogueAttr = "smla.fused_epilogue";
/// Marks the scatter_packed chunk right before a fused run that
/// warpgroups 1-3 run alongside it (overlapChunks, DeferScatter.cpp), or
/// the two chunks right before it (overlap-chunks=2), the value being the
/// chunk's place counted back from the run (1: right before it): each chunk's
/// columns split three ways, its wgmma reads of the packed tiles and its
/// slot loads ordered before warpgroup 0's packed stores and slot writes
/// by named barrier kOverlapBarrier (bar.arrive after the last chunk's,
/// bar.sync in the run), not by a CTA barrier; smla-insert-barriers sees
/// the chunks and the run as one op. The gpu.func carries the number of
/// such chunks as the attribute's value (smla-compile checks
/// epilogue=overlap and overlap_chunks against it).
constexpr llvm::StringLiteral kOverlapRunAttr = "smla.overlap_run";
constexpr int64_t kOverlapBarrier = 1;

/// `fence.proxy.async.shared::cta`: generic-proxy writes of shared memory
/// before async-proxy (wgmma) reads.
void emitProxyFence(OpBuilder &b, Location loc);

/// Whether the tile products of `op`'s kernels use mma.sync: `option`,
/// unless the enclosing builtin module says `smla.mma` (smla-compile
/// --mma=false).
bool mmaEnabled(Operation *op, bool option);

/// The dQ accumulators of `func` (workgroup allocas) that the register form
/// holds, with their column pairs per warp: those zero-filled at least once
/// and otherwise only accumulated into by mma dq_accumulate ops and stored,
/// whose pairs fit the registers per thread the kernel's threads and
/// `smla.ctas_per_sm` leave above the rest of the kernel (LowerDqMma.cpp).
/// The map is keyed by the accumulator operand; its storage is the alloca
/// `soleRootAlloca` finds.
llvm::DenseMap<Value, int64_t> planDqRegisters(gpu::GPUFuncOp func);

/// softmax and dscores are elementwise: their lowering reads and writes
/// element (h, j) of their [Hb, B] tiles in the same thread. When the tile
/// one of them reads (scores, dP) has no reader but that op and is written
/// only by tile_dots before it in its block, and every other use of the
/// op's result tile (P, dS) follows it in that block, the result can live
/// in the same shared memory: within one pass over the block nothing
/// writes the input again before the result's last use. Result alloca ->
/// input alloca (InPlaceTiles.cpp; smla-gpu-map places the tiles).
llvm::DenseMap<Value, Value> inPlaceTiles(func::FuncOp func);

/// The alloca a workgroup memref is a (sub)view of, through subviews and
/// casts, or null.
memref::AllocaOp rootAlloca(Value v);
/// rootAlloca(acc), if every value between acc and it has a single use
/// (acc is the alloca's only view), else null.
memref::AllocaOp soleRootAlloca(Value acc);

/// The `sm_scale` argument of the kernel holding `op`, or null when the
/// kernel has none (then the op's constant `scale` attribute is used).
Value runtimeScale(Operation *op);

} // namespace mlir::smla

#endif // SMLA_CONVERSION_SMLATONVVM_SMLATONVVM_H
