//===- Passes.td - smla-lower-to-loops: the tile IR as loops for the CPU -===//
//
// Part of the smla project: a compiled sparse-MLA backward.
// Included by smla/Conversion/Passes.td (one pass declaration file and
// one generated reference page for every conversion pass).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATOLOOPS_PASSES_TD
#define SMLA_CONVERSION_SMLATOLOOPS_PASSES_TD

include "mlir/Pass/PassBase.td"

def SMLALowerToLoops : Pass<"smla-lower-to-loops"> {
  let summary = "Lower guarded smla tile ops to scf/arith/math/memref/vector";
  let description = [{
    The CPU execution path: every tile op becomes scalar loops over memrefs,
    with the guards made concrete:

    * `smla.index_load`: a `vector.maskedload` under
      `vector.create_mask min(K - offset, B)` with -1 pass-through;
    * `smla.index_mask`: `arith.cmpi sge 0`, `slt bound`, the lane compare
      against `vector.step`, and `sle limit` with positions, and-ed;
    * `smla.row_live`: `|lse| < +inf` (false for +-inf and NaN);
    * `smla.gather` / `smla.scatter_dkv`: the row index is cast to an
      address only inside `scf.if %mask[j]`; masked gathers store zeros;
    * `smla.softmax`: `math.exp2(arith.minimumf(x2, clamp))` consumed by
      `arith.select(mask[j] && live[h], e, 0)`.

    Before:
    ```mlir
    smla.softmax %s, %lse[%t, %g] mask(%m : vector<64xi1>)
        live(%live : vector<16xi1>) into %p
        {base = #smla.lse_base<base2>, clamp = 3.200000e+01 : f32,
         scale = 0.0416666679 : f32}
        : memref<16x64xf32>, memref<?x16xf32>, memref<16x64xf32>
    ```
    After (the body of the loops over h and j):
    ```mlir
    %x2 = arith.subf %scaled, %lse2 : f32
    %xc = arith.minimumf %x2, %cst_clamp : f32
    %e = math.exp2 %xc : f32
    %ok = arith.andi %m_j, %live_h : i1
    %p = arith.select %ok, %e, %cst_zero : f32
    memref.store %p, %probs[%h, %j] : memref<16x64xf32>
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
}


//===----------------------------------------------------------------------===//
// GPU code generation (docs/compiler.md, docs/wgmma-kernels.md).
//===----------------------------------------------------------------------===//

#endif // SMLA_CONVERSION_SMLATOLOOPS_PASSES_TD
