//===- SMLAGPU.h - smla_gpu dialect -----------------------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLAGPU_IR_SMLAGPU_H
#define SMLA_DIALECT_SMLAGPU_IR_SMLAGPU_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "smla/Dialect/SMLAGPU/IR/SMLAGPUOpsDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "smla/Dialect/SMLAGPU/IR/SMLAGPUOpsTypes.h.inc"

#define GET_OP_CLASSES
#include "smla/Dialect/SMLAGPU/IR/SMLAGPUOps.h.inc"

namespace mlir::smla_gpu {
/// Threads of one warpgroup.
constexpr int64_t kWarpgroupThreads = 128;
/// Rows of every wgmma accumulator fragment (m64).
constexpr int64_t kFragmentRows = 64;
/// Columns of one slab of the 128-byte swizzle (128 bytes of bf16).
constexpr int64_t kSlabColumns = 64;
/// Registers one SM has for all its threads.
constexpr int64_t kRegistersPerSm = 65536;
} // namespace mlir::smla_gpu

#endif // SMLA_DIALECT_SMLAGPU_IR_SMLAGPU_H
