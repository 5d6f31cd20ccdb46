//===- SMLA.h - smla dialect ------------------------------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLA_IR_SMLA_H
#define SMLA_DIALECT_SMLA_IR_SMLA_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "smla/Dialect/SMLA/IR/SMLAOpsDialect.h.inc"

#include "smla/Dialect/SMLA/IR/SMLAEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "smla/Dialect/SMLA/IR/SMLAAttrs.h.inc"

#define GET_OP_CLASSES
#include "smla/Dialect/SMLA/IR/SMLAOps.h.inc"

namespace mlir::smla {
/// Counter slots of the optional `counters` buffer.
enum CounterSlot : int64_t {
  kInvalidSlots = 0,
  kDeadRows = 1,
  kClamped = 2,
  kNonFiniteRows = 3
};
/// Number of counters.
constexpr int64_t kNumCounters = 4;
/// Upper bound on the base-2 softmax exponent after the clamp. Consistent
/// inputs never exceed 0 (lse is at least the largest score); 32 leaves room
/// for rounding and still keeps P <= 2^32, far from fp32 overflow even after
/// the dS and dKV sums.
constexpr double kExp2Clamp = 32.0;
/// The largest clamp the verifier accepts: exp2 of it stays finite in f32
/// with head-room for sums over top-k and heads.
constexpr double kMaxExp2Clamp = 64.0;
} // namespace mlir::smla

#endif // SMLA_DIALECT_SMLA_IR_SMLA_H
