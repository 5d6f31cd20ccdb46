//===- Passes.h - smla transformation passes --------------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLA_TRANSFORMS_PASSES_H
#define SMLA_DIALECT_SMLA_TRANSFORMS_PASSES_H

#include "smla/Dialect/SMLA/IR/SMLA.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Pass/Pass.h"

namespace mlir::smla {

#define GEN_PASS_DECL
#include "smla/Dialect/SMLA/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "smla/Dialect/SMLA/Transforms/Passes.h.inc"

} // namespace mlir::smla

#endif // SMLA_DIALECT_SMLA_TRANSFORMS_PASSES_H
