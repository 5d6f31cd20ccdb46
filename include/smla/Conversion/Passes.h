//===- Passes.h - smla conversion passes ------------------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_PASSES_H
#define SMLA_CONVERSION_PASSES_H

#include "smla/Conversion/SMLAGPUToNVVM/SMLAGPUToNVVM.h"
#include "smla/Conversion/SMLAToLoops/SMLAToLoops.h"
#include "smla/Conversion/SMLAToNVVM/SMLAToNVVM.h"
#include "smla/Conversion/SMLAToSMLAGPU/SMLAToSMLAGPU.h"

namespace mlir::smla {
#define GEN_PASS_REGISTRATION
#include "smla/Conversion/Passes.h.inc"
} // namespace mlir::smla

#endif // SMLA_CONVERSION_PASSES_H
