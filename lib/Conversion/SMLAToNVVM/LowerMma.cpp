//===- LowerMma.cpp - tile_dot and dq_accumulate on tensor cores ----------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

using namespace mlir;
using namespace mlir::smla;

namespace mlir::smla {
bool canUseMma(TileDotOp) { return false; }
bool canUseMma(DqAccumulateOp) { return false; }
void lowerTileDotMma(CtaEmitter &, TileDotOp) {}
void lowerDqAccumulateMma(CtaEmitter &, DqAccumulateOp) {}
} // namespace mlir::smla
