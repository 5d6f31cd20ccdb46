//===- SMLAGPUDialect.cpp - smla_gpu dialect and types --------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLAGPU/IR/SMLAGPU.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::smla_gpu;

#include "smla/Dialect/SMLAGPU/IR/SMLAGPUOpsDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "smla/Dialect/SMLAGPU/IR/SMLAGPUOpsTypes.cpp.inc"

void SMLAGPUDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "smla/Dialect/SMLAGPU/IR/SMLAGPUOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "smla/Dialect/SMLAGPU/IR/SMLAGPUOpsTypes.cpp.inc"
      >();
}

LogicalResult
PipelineType::verify(function_ref<InFlightDiagnostic()> emitError,
                     int64_t stages, int64_t producers, int64_t consumers) {
  if (stages < 1 || stages > 8)
    return emitError() << "pipeline stages must be in [1, 8], got " << stages;
  // An mbarrier counts at most 2^20 - 1 arrivals.
  if (producers < 1 || consumers < 1 || producers >= (1 << 19) ||
      consumers >= (1 << 20))
    return emitError() << "pipeline producers and consumers must be positive "
                          "arrival counts, got "
                       << producers << " and " << consumers;
  return success();
}
