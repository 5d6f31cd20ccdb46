//===- Passes.td - smla conversion passes ------------------*- tablegen -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_PASSES_TD
#define SMLA_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

// Each conversion's passes are declared next to its headers; the order
// below is the pipeline's, and the generated reference page's.
include "SMLAToLoops/Passes.td"
include "SMLAToNVVM/Passes.td"
include "SMLAToSMLAGPU/Passes.td"
include "SMLAGPUToNVVM/Passes.td"

#endif // SMLA_CONVERSION_PASSES_TD
