//===- Pipelines.h - named smla pass pipelines ------------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PIPELINES_PIPELINES_H
#define SMLA_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"

namespace mlir::smla {

/// Decomposition, index masks, softmax guards, then the guard verifier:
/// the guarded tile IR (`smla-guarded`).
void buildGuardedPipeline(OpPassManager &pm);

/// The guarded pipeline, the loop lowering, the guard verifier again on the
/// lowered IR, and the standard lowering to the LLVM dialect (`smla-cpu`).
void buildCpuPipeline(OpPassManager &pm);

/// The guarded pipeline mapped to gpu.funcs, shared memory placed and
/// verified, tile ops lowered to gpu/nvgpu/nvvm (`smla-gpu-kernels`), with
/// `threads` threads per CTA (a multiple of 32); q/do rows are staged in
/// shared memory only within the share that leaves room for `ctasPerSm`
/// CTAs per SM. With `prefetchKeys`, each block's key gather is issued
/// during the previous block (smla-prefetch-keys), but for `wgmmaScatter`
/// (the configuration key scatter=wgmma), whose dQ update on wgmma reads
/// the key tile until the end of each block. `clusterHeadBlocks` (the key
/// cluster=1) runs a wgmma kernel's head blocks per token (an even number)
/// in clusters of two that split the dKV columns. `fusedEpilogue` (the
/// key epilogue=fused) runs softmax, dS and the pack in the wgmma block
/// products' warpgroup (smla-defer-scatter's fuse-epilogue);
/// `overlapChunks` (the keys epilogue=overlap, overlap_chunks) also runs
/// the step's last 1 or 2 dKV chunks in warpgroups 1-3 alongside it
/// (overlap-chunks).
void buildGpuKernelPipeline(OpPassManager &pm, int64_t threads = 256,
                            int64_t ctasPerSm = 1, bool prefetchKeys = true,
                            bool wgmmaScatter = false,
                            bool clusterHeadBlocks = false,
                            bool fusedEpilogue = false,
                            int64_t overlapChunks = 0);
/// The kernels of the warp-specialized schedule (docs/schedule.md):
/// smla-guarded, smla-gpu-map on 384 threads without staged rows,
/// smla-schedule-warp-specialized, the shared-memory placement and check,
/// smla-gpu-to-nvvm, smla-lower-to-nvvm for the other kernels, and the
/// guard check of the lowered exponentials.
/// `softmaxChunks` and `dkvDepth` are smla-schedule-warp-specialized's
/// options (negative / 0: its defaults).
void buildWarpSpecializedKernelPipeline(OpPassManager &pm,
                                        int64_t softmaxChunks = -1,
                                        int64_t dkvDepth = 0);

/// The standard lowering of `smla-gpu-kernels` output to a gpu.binary with
/// sm_90a PTX (+ptx81).
void buildGpuToPtxPipeline(OpPassManager &pm,
                           llvm::StringRef cudaPath = "/usr/local/cuda");

/// `smla-gpu-kernels` lowered to a gpu.binary holding sm_90a PTX
/// (`smla-gpu`).
void buildGpuPipeline(OpPassManager &pm);

/// Registers the smla pipelines with the pass registry.
void registerPipelines();

} // namespace mlir::smla

#endif // SMLA_PIPELINES_PIPELINES_H
