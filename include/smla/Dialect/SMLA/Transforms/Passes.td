//===- Passes.td - smla transformation passes --------------*- tablegen -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLA_TRANSFORMS_PASSES_TD
#define SMLA_DIALECT_SMLA_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def SMLADecompose : Pass<"smla-decompose"> {
  let summary = "Decompose smla.sparse_attention_bwd into tile ops over "
                "top-k blocks";
  let description = [{
    Replaces each `smla.sparse_attention_bwd` by a loop nest over query
    tokens t, kv groups g and top-k blocks of `config.block` slots, whose
    body is made of tile ops. The number of blocks is ceil(K / block) for the
    run-time K; the tail block's missing lanes load as -1 and are masked by
    the lane count, so any K >= 1 works and nothing past K is read.

    The ops it emits are unguarded: `smla-insert-index-masks` and
    `smla-insert-softmax-guards` must run next, and `smla-verify-guards`
    rejects the output of this pass on its own.

    Before:
    ```mlir
    smla.sparse_attention_bwd q(%q : ...) kv(%kv : ...) ... {config = ...}
    ```
    After (abridged, Hg = H / G heads per group, B = block, W = D + Dt):
    ```mlir
    linalg.fill ins(%zero : f32) outs(%dkv_accum : memref<?x1x576xf32>)
    scf.for %t = %c0 to %T step %c1 {
      scf.for %g = %c0 to %c1 step %c1 {
        smla.delta %o, %do[%t, %g] into %delta ...
        linalg.fill ins(%zero : f32) outs(%acc : memref<16x576xf32>)
        scf.for %b = %c0 to %nblocks step %c1 {
          %k0 = arith.muli %b, %c64 : index
          %idx = smla.index_load %indices[%t, %g, %k0] : ... -> vector<64xi32>
          smla.gather %kv[%g] rows(%idx) into %tile ...
          smla.tile_dot %q[%t, %g], %tile into %s ...
          smla.softmax %s, %lse[%t, %g] into %p {base = ..., scale = ...} ...
          smla.tile_dot %do[%t, %g], %tile into %dp ...
          smla.dscores %p, %dp, %delta into %ds {scale = ...} ...
          smla.dq_accumulate %ds, %tile into %acc ...
          smla.scatter_dkv %ds, %p, %q, %do[%t, %g] rows(%idx) into %dkv_accum ...
        }
        smla.store_dq %acc into %dq[%t, %g] counters(%c : ...) ...
      }
    }
    smla.cast_dkv %dkv_accum into %dkv counters(%c : ...) ...
    ```
    With a `counters` operand, the dq store and the final `smla.cast_dkv`
    count the rows of the results that are not finite (an f32 dkv gets a
    `smla.cast_dkv` without `into` that only counts).
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect"];
}

def SMLAInsertIndexMasks : Pass<"smla-insert-index-masks"> {
  let summary = "Guard every gather and scatter with the slot validity mask";
  let description = [{
    For each `smla.gather` and `smla.scatter_dkv` without a mask, builds the
    validity predicate of its index block and attaches it:
    `0 <= idx < S_kv` where S_kv is dim 0 of the tensor the op reads or
    writes, `lane < min(B, K - offset)` for the tail block, and
    `idx <= position[t]` when the indices came with a position limit.
    Masked lanes read zero and write nothing. The first mask built for an
    index block also counts invalid slots when the function has a guard
    counter buffer (the `counters` operand of the decomposed op).
    Ops that already carry a mask are left alone, so the pass is idempotent.

    Before:
    ```mlir
    %idx = smla.index_load %indices[%t, %g, %k0] limit %pos
        : memref<?x1x?xi32> -> vector<64xi32>
    smla.gather %kv[%g] rows(%idx) into %tile
        : memref<?x1x576xbf16>, vector<64xi32>, memref<64x576xbf16>
    ```
    After:
    ```mlir
    %idx = smla.index_load %indices[%t, %g, %k0] limit %pos
        : memref<?x1x?xi32> -> vector<64xi32>
    %S = memref.dim %kv, %c0 : memref<?x1x576xbf16>
    %K = memref.dim %indices, %c2 : memref<?x1x?xi32>
    %left = arith.subi %K, %k0 : index
    %n = arith.minsi %left, %c64 : index
    %m = smla.index_mask %idx below %S lanes %n limit %pos
        : vector<64xi32> -> vector<64xi1>
    smla.gather %kv[%g] rows(%idx) mask(%m : vector<64xi1>) into %tile
        : memref<?x1x576xbf16>, vector<64xi32>, memref<64x576xbf16>
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect"];
}

def SMLAInsertSoftmaxGuards : Pass<"smla-insert-softmax-guards"> {
  let summary = "Guard every softmax exponential against dead rows, invalid "
                "lanes and overflow";
  let description = [{
    For each `smla.softmax` that is not yet guarded:

    * attaches `live`, from an `smla.row_live` of the same lse row, placed
      where token and group are first defined (once per row, not per block):
      a row whose lse is +inf, -inf or NaN is dead;
    * attaches `mask`, the validity mask already built for the block's
      indices by `smla-insert-index-masks` (that pass must run first);
    * sets `clamp` to 32: the base-2 exponent is clamped to 32 before exp2,
      so a stale or mismatched lse gives large finite values, never inf.

    The guarded softmax selects P to exactly 0 for dead rows and invalid
    lanes. Guarded ops are left alone, so the pass is idempotent.

    Before:
    ```mlir
    smla.softmax %s, %lse[%t, %g] into %p
        {base = #smla.lse_base<base2>, scale = 0.0416666679 : f32}
        : memref<16x64xf32>, memref<?x16xf32>, memref<16x64xf32>
    ```
    After:
    ```mlir
    %live = smla.row_live %lse[%t, %g] : memref<?x16xf32> -> vector<16xi1>
    ...
    smla.softmax %s, %lse[%t, %g] mask(%m : vector<64xi1>)
        live(%live : vector<16xi1>) into %p
        {base = #smla.lse_base<base2>, clamp = 3.200000e+01 : f32,
         scale = 0.0416666679 : f32}
        : memref<16x64xf32>, memref<?x16xf32>, memref<16x64xf32>
    ```
  }];
}

def SMLAVerifyGuards : Pass<"smla-verify-guards"> {
  let summary = "Refuse IR with an unguarded gather, scatter or exponential";
  let description = [{
    Fails, with an error at the offending op, if

    * an `smla.gather` or `smla.scatter_dkv` has no mask, or its mask is not
      an `smla.index_mask` of the same index block bounded by dim 0 of the
      very tensor the op reads or writes (and by the position limit the
      indices carry, if any);
    * an `smla.softmax` lacks its mask, its `live` rows (an `smla.row_live`
      of the same lse row) or its clamp;
    * an `smla.sparse_attention_bwd` is still present (it has no guards);
    * after lowering, a `math.exp2` or `math.exp` is not fed by a clamp
      (`arith.minimumf`/`arith.minnumf` with a constant at most 64), or one
      of its results is used by anything but the true branch of an
      `arith.select` whose false branch is the constant 0.0.

    It changes nothing and runs at the end of every smla pipeline. What
    passes it is guaranteed to dereference no invalid slot and to compute
    no exponential that can be inf or NaN.

    Rejected (the mask is bounded by another tensor's dim 0, so it does
    not prove the gather's rows are inside kv):
    ```mlir
    %S2 = memref.dim %other, %c0 : memref<?x1x48xbf16>
    %m2 = smla.index_mask %i below %S2 lanes %n : vector<16xi32> -> vector<16xi1>
    // error: 'smla.gather' op is an unguarded gather: mask bound is not
    //        dim 0 of the tensor this op accesses
    smla.gather %kv[%g] rows(%i) mask(%m2 : vector<16xi1>) into %keys
        : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
    ```
    Rejected after lowering (no clamp before the exponential):
    ```mlir
    // error: 'math.exp2' op is an unguarded exponential: its exponent is
    //        not clamped by a constant <= 64
    %e = math.exp2 %x : f32
    ```
  }];
}

#endif // SMLA_DIALECT_SMLA_TRANSFORMS_PASSES_TD
