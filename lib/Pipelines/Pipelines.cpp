//===- Pipelines.cpp - named smla pass pipelines --------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Pipelines/Pipelines.h"
#include "smla/Conversion/Passes.h"
#include "smla/Dialect/SMLA/Transforms/Passes.h"

#include "smla/Dialect/SMLAGPU/IR/SMLAGPU.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void mlir::smla::buildGuardedPipeline(OpPassManager &pm) {
  pm.addPass(createSMLADecompose());
  pm.addPass(createSMLAInsertIndexMasks());
  pm.addPass(createSMLAInsertSoftmaxGuards());
  pm.addPass(createSMLAVerifyGuards());
}

void mlir::smla::buildCpuPipeline(OpPassManager &pm) {
  buildGuardedPipeline(pm);
  pm.addPass(createSMLALowerToLoops());
  pm.addPass(createSMLAVerifyGuards());
  // The standard lowering of what the loop lowering produced. bf16 is
  // expanded to integer arithmetic so that no soft-float runtime is needed.
  const char *toLLVM =
      "convert-linalg-to-loops,canonicalize,cse,"
      "convert-vector-to-scf,convert-scf-to-cf,"
      "arith-expand{include-bf16=true},"
      "convert-vector-to-llvm,expand-strided-metadata,"
      "finalize-memref-to-llvm,convert-math-to-llvm,convert-arith-to-llvm,"
      "convert-index-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,"
      "reconcile-unrealized-casts";
  if (failed(parsePassPipeline(toLLVM, pm)))
    llvm::report_fatal_error("smla: malformed built-in CPU pipeline");
}

void mlir::smla::buildGpuKernelPipeline(OpPassManager &pm, int64_t threads,
                                        int64_t ctasPerSm, bool prefetchKeys,
                                        bool wgmmaScatter,
                                        bool clusterHeadBlocks,
                                        bool fusedEpilogue,
                                        int64_t overlapChunks) {
  buildGuardedPipeline(pm);
  SMLAGpuMapOptions mapOptions;
  mapOptions.threads = threads;
  mapOptions.ctasPerSm = ctasPerSm;
  mapOptions.wgmmaScatter = wgmmaScatter;
  mapOptions.clusterHeadBlocks = clusterHeadBlocks;
  pm.addPass(createSMLAGpuMap(mapOptions));
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  // With the wgmma scatter the step's dQ (dq_packed, at its end) reads the
  // key tile until the step is over: no key gather can be issued early.
  if (prefetchKeys && !wgmmaScatter)
    kernels.addPass(createSMLAPrefetchKeys());
  SMLADeferScatterOptions deferOptions;
  deferOptions.fuseEpilogue = fusedEpilogue;
  deferOptions.overlapChunks = overlapChunks;
  kernels.addPass(createSMLADeferScatter(deferOptions));
  // The split scatter's guard lives in its pack_dkv: checked here, while
  // the tile ops are still there to check.
  kernels.addPass(createSMLAVerifyGuards());
  kernels.addPass(createSMLAAllocateSmem());
  kernels.addPass(createSMLAVerifySmem());
  kernels.addPass(createSMLAInsertBarriers());
  kernels.addPass(createSMLALowerToNVVM());
  kernels.addPass(createSMLAVerifySmem());
  pm.addPass(createSMLAVerifyGuards());
}

void mlir::smla::buildWarpSpecializedKernelPipeline(OpPassManager &pm,
                                                    int64_t softmaxChunks,
                                                    int64_t dkvDepth) {
  buildGuardedPipeline(pm);
  SMLAGpuMapOptions mapOptions;
  mapOptions.threads = 3 * smla_gpu::kWarpgroupThreads;
  mapOptions.stageTokenRows = false;
  pm.addPass(createSMLAGpuMap(mapOptions));
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  SMLAScheduleWarpSpecializedOptions scheduleOptions;
  if (softmaxChunks >= 0)
    scheduleOptions.softmaxChunks = softmaxChunks;
  if (dkvDepth > 0)
    scheduleOptions.dkvDepth = dkvDepth;
  kernels.addPass(createSMLAScheduleWarpSpecialized(scheduleOptions));
  // The roles' gathers and reductions read masks and slots: checked while
  // the smla_gpu ops are there to check.
  kernels.addPass(createSMLAVerifyGuards());
  kernels.addPass(createSMLAAllocateSmem());
  kernels.addPass(createSMLAVerifySmem());
  kernels.addPass(createSMLAGPUToNVVM());
  kernels.addPass(createSMLALowerToNVVM());
  kernels.addPass(createSMLAVerifySmem());
  pm.addPass(createSMLAVerifyGuards());
}

void mlir::smla::buildGpuToPtxPipeline(OpPassManager &pm, StringRef cudaPath) {
  // The standard route to PTX (docs/compiler.md): bare-pointer kernel
  // parameters, PTX ISA 8.1 for the vector red.global.add, libdevice linked
  // by gpu-module-to-binary for math.exp2.
  const char *toPtx =
      "gpu.module(cse,canonicalize,expand-strided-metadata,lower-affine),"
      "convert-nvgpu-to-nvvm,"
      "gpu.module(convert-scf-to-cf,"
      "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1}),"
      "convert-nvvm-to-llvm,convert-vector-to-llvm,convert-arith-to-llvm,"
      "convert-index-to-llvm,convert-cf-to-llvm,convert-ub-to-llvm,"
      "reconcile-unrealized-casts,"
      "nvvm-attach-target{chip=sm_90a features=+ptx81 O=3},"
      "gpu-module-to-binary{format=isa toolkit=";
  // The toolkit path is explicit: without it libdevice is only found
  // through the environment, and an unlinked __nv_* call fails in ptxas.
  if (failed(parsePassPipeline((toPtx + cudaPath + "}").str(), pm)))
    llvm::report_fatal_error("smla: malformed built-in GPU pipeline");
}

void mlir::smla::buildGpuPipeline(OpPassManager &pm) {
  buildGpuKernelPipeline(pm);
  buildGpuToPtxPipeline(pm);
}

void mlir::smla::registerPipelines() {
  PassPipelineRegistration<>(
      "smla-guarded",
      "Decompose smla.sparse_attention_bwd into guarded tile ops and verify "
      "the guards",
      buildGuardedPipeline);
  PassPipelineRegistration<>(
      "smla-cpu",
      "The guarded pipeline lowered to loops and on to the LLVM dialect, "
      "for execution on the CPU",
      buildCpuPipeline);
  PassPipelineRegistration<>(
      "smla-gpu-kernels",
      "The guarded pipeline mapped onto gpu.funcs, with shared memory "
      "placed and verified and the tile ops lowered to gpu/nvgpu/nvvm",
      [](OpPassManager &pm) { buildGpuKernelPipeline(pm); });
  PassPipelineRegistration<>(
      "smla-gpu-kernels-warp-specialized",
      "smla-gpu-kernels with the bwd kernel's block loop as warpgroup roles "
      "(smla-schedule-warp-specialized, then smla-gpu-to-nvvm)",
      [](OpPassManager &pm) { buildWarpSpecializedKernelPipeline(pm); });
  PassPipelineRegistration<>(
      "smla-gpu",
      "smla-gpu-kernels lowered to PTX for sm_90a (gpu.binary, format=isa)",
      buildGpuPipeline);
}
