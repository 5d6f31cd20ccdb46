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

/// Registers `smla-guarded` and `smla-cpu` with the pass registry.
void registerPipelines();

} // namespace mlir::smla

#endif // SMLA_PIPELINES_PIPELINES_H
