//===- SMLADialect.cpp - smla dialect and attributes ----------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLA/IR/SMLA.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::smla;

#include "smla/Dialect/SMLA/IR/SMLAOpsDialect.cpp.inc"

#include "smla/Dialect/SMLA/IR/SMLAEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "smla/Dialect/SMLA/IR/SMLAAttrs.cpp.inc"

void SMLADialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "smla/Dialect/SMLA/IR/SMLAOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "smla/Dialect/SMLA/IR/SMLAAttrs.cpp.inc"
      >();
}

static bool isOutputType(Type type) { return type.isBF16() || type.isF32(); }

LogicalResult ConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t d, int64_t dt, int64_t heads,
                                 int64_t groups, int64_t block, LseBase lseBase,
                                 bool positions, Type dqType, Type dkvType,
                                 int64_t headBlocks, int64_t tokens) {
  if (d < 16 || d % 16 != 0)
    return emitError() << "d must be a positive multiple of 16, got " << d;
  if (dt < 0 || dt % 16 != 0)
    return emitError() << "dt must be a non-negative multiple of 16, got "
                       << dt;
  if (heads < 1)
    return emitError() << "heads must be >= 1, got " << heads;
  if (groups < 1)
    return emitError() << "groups must be >= 1, got " << groups;
  if (heads % groups != 0)
    return emitError() << "heads (" << heads
                       << ") must be divisible by groups (" << groups << ")";
  if (headBlocks < 1 || (heads / groups) % headBlocks != 0)
    return emitError() << "headBlocks (" << headBlocks
                       << ") must be >= 1 and divide the heads per group ("
                       << heads / groups << ")";
  if (block < 16 || block > 256 || block % 16 != 0)
    return emitError() << "block must be a multiple of 16 in [16, 256], got "
                       << block;
  if (!dqType || !isOutputType(dqType))
    return emitError() << "dqType must be bf16 or f32, got " << dqType;
  if (!dkvType || !isOutputType(dkvType))
    return emitError() << "dkvType must be bf16 or f32, got " << dkvType;
  if (tokens != 1 && tokens != 2)
    return emitError() << "tokens must be 1 or 2, got " << tokens;
  if (tokens > 1 && (groups != 1 || headBlocks != 1 || heads % tokens != 0))
    return emitError() << "tokens = " << tokens
                       << " needs groups = 1, headBlocks = 1 and heads ("
                       << heads << ") divisible by tokens";
  return success();
}
