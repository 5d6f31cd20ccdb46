//===- Wgmma.h - warpgroup MMA helpers of the lowerings ---------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// wgmma.mma_async (sm_90a) as single-instruction inline PTX, its fence /
// commit / wait, and shared-memory matrix descriptors for the canonical
// no-swizzle layout (8 x 8 core matrices of 128 contiguous bytes) or the
// 128-byte swizzle. The no-swizzle LBO / SBO readings were checked on the
// H200 by bench/wgmma.cu and bench/wgmma_dkv.cu (the swapped ones give
// garbage): a K-major operand of R rows takes LBO = R * 16 (the K stride),
// SBO = 128; an MN-major one LBO = 128 (K), SBO = the stride of 8
// columns. With the 128-byte swizzle a K-major operand takes SBO = the
// stride of 8 rows (LBO unused), an MN-major one LBO = the stride of 64
// MN elements and SBO = the stride of 8 K rows (test_gpu.py checks both
// through the swizzled key tile).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATONVVM_WGMMA_H
#define SMLA_CONVERSION_SMLATONVVM_WGMMA_H

#include "smla/Conversion/SMLAToNVVM/MmaBuilder.h"

namespace mlir::smla::wgmma {

/// Inline PTX with side effects: `result` (or none) from `operands`.
LLVM::InlineAsmOp inlineAsm(OpBuilder &b, Location loc, Type result,
                            ValueRange operands, StringRef text,
                            StringRef constraints);
/// An inline PTX statement without operands (`wgmma.fence.sync.aligned;`).
void statement(OpBuilder &b, Location loc, StringRef text);
void fence(OpBuilder &b, Location loc);
void commit(OpBuilder &b, Location loc);
void wait(OpBuilder &b, Location loc, int64_t pending);

/// A shared-memory matrix descriptor: start address (byte address as
/// index), LBO and SBO in bytes, no swizzle or (swizzle128, the tile 1024-
/// byte aligned) the 128-byte swizzle. desc + bytes / 16 moves the start
/// by `bytes` (shared addresses stay below 2^18); within a swizzled
/// 128-byte row that is how a K-major operand steps along K.
Value descriptor(mma::Mma &m, Value addr, int64_t lbo, int64_t sbo,
                 bool swizzle128 = false);
Value advance(mma::Mma &m, Value desc, int64_t bytes);

/// `v` (index) through an opaque `mov`: LLVM cannot hoist what is
/// computed from it out of the loop it sits in.
Value launder(mma::Mma &m, Value v);

/// d (N / 2 f32 per thread) += A[64 x 16] B[16 x N] (bf16 -> f32). A is
/// four registers of this warp's m16k16 fragment (the mma.sync A layout)
/// when `aRegs` is given, else the descriptor `descA`, K-major or (transA)
/// MN-major; B is the descriptor `descB`, K-major or (transB) MN-major. With no
/// `d`, d = A B (scale-d false): the accumulators are first defined by the
/// wgmma, so no register write precedes it that ptxas would order with a
/// warpgroup.arrive of its own (C7520).
SmallVector<Value> mmaAsync(mma::Mma &m, int64_t n, ValueRange aRegs,
                            Value descA, Value descB, bool transB, ValueRange d,
                            bool transA = false);

} // namespace mlir::smla::wgmma

#endif // SMLA_CONVERSION_SMLATONVVM_WGMMA_H
