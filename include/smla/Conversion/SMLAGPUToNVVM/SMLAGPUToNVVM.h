//===- SMLAGPUToNVVM.h - the smla_gpu schedule to NVVM ----------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// smla-gpu-to-nvvm: one rewrite pattern per smla_gpu op. The patterns of
// each file are populated by its own function; the pass
// (SMLAGPUToNVVM.cpp) applies them in two rounds (every op that reads a
// pipeline before the pipelines and the roles themselves).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLAGPUTONVVM_SMLAGPUTONVVM_H
#define SMLA_CONVERSION_SMLAGPUTONVVM_SMLAGPUTONVVM_H

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"
#include "smla/Dialect/SMLAGPU/IR/SMLAGPU.h"

#include "mlir/IR/PatternMatch.h"

namespace mlir::smla {

#define GEN_PASS_DECL_SMLAGPUTONVVM
#include "smla/Conversion/Passes.h.inc"

/// wgmma, wgmma_wait, pack_operand (LowerWgmma.cpp).
void populateWgmmaPatterns(RewritePatternSet &patterns);
/// fragment_rows, fragment_columns, store_fragment, store_rows, count,
/// reduce_dkv (LowerFragments.cpp).
void populateFragmentPatterns(RewritePatternSet &patterns);
/// load_rows (LowerCopies.cpp).
void populateCopyPatterns(RewritePatternSet &patterns);
/// producer_acquire / commit, consumer_wait / release (LowerPipelines.cpp).
void populatePipelineUsePatterns(RewritePatternSet &patterns);
/// pipeline_create, warp_specialize, thread_in_warpgroup
/// (LowerPipelines.cpp), applied once every use of a pipeline is lowered.
void populateRolePatterns(RewritePatternSet &patterns);

/// gather_keys and write_slots read index and mask lanes (LowerCopies.cpp):
/// they are lowered with the role's lane functions, not by a pattern.
LogicalResult lowerGatherKeys(CtaEmitter &e, smla_gpu::GatherKeysOp op,
                              const LaneFn &mask, const LaneFn &index);
LogicalResult lowerWriteSlots(CtaEmitter &e, smla_gpu::WriteSlotsOp op,
                              const LaneMap &lanes);

/// store_rows (LowerFragments.cpp); with `flag`, each stored value also
/// flags a NaN or an Inf (count_nonfinite_rows reads the flag).
void lowerStoreRows(OpBuilder &b, smla_gpu::StoreRowsOp op,
                    NonFiniteFlag *flag);

/// The thread's place in an m64nN accumulator fragment: warp w (of the
/// warpgroup), lane l; rows r0 = 16 w + l / 4 and r1 = r0 + 8; element
/// 4 i + {0, 1} at (r0, 8 i + 2 (l % 4) + {0, 1}), 4 i + {2, 3} at r1.
struct FragmentPlace {
  Value r0, r1, quad; // quad = l % 4
};
FragmentPlace fragmentPlace(OpBuilder &b, Location loc);

/// The element offset of (row, col) in a bf16 tile of `rows` rows in the
/// 128-byte swizzle (64-column slabs of rows x 64 elements; 8-element
/// chunks XOR-ed with row % 8).
Value swizzledOffset(OpBuilder &b, Location loc, int64_t rows, Value row,
                     Value col);
/// A flat 1-D view of a shared tile (its bytes as one bf16 vector).
Value flatTile(OpBuilder &b, Location loc, Value tile);

} // namespace mlir::smla

#endif // SMLA_CONVERSION_SMLAGPUTONVVM_SMLAGPUTONVVM_H
