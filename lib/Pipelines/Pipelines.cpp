//===- Pipelines.cpp - named smla pass pipelines --------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Pipelines/Pipelines.h"
#include "smla/Conversion/Passes.h"
#include "smla/Dialect/SMLA/Transforms/Passes.h"

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
}
