//===- SMLADialect.td - smla dialect definition ------------*- tablegen -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLA_IR_SMLADIALECT_TD
#define SMLA_DIALECT_SMLA_IR_SMLADIALECT_TD

include "mlir/IR/OpBase.td"

def SMLA_Dialect : Dialect {
  let name = "smla";
  let cppNamespace = "::mlir::smla";
  let summary = "Sparse multi-latent attention backward, with explicit guards";
  let description = [{
    The `smla` dialect states the backward pass of sparse top-k multi-latent
    attention (DeepSeek Sparse Attention) at two levels:

    * `smla.sparse_attention_bwd`: the whole computation on memrefs, as a user
      states it, configured by a `#smla.config` attribute;
    * tile-level ops over one query token `t`, one kv group `g` and one block
      of top-k slots: index loads, validity masks, masked gathers, score and
      dP products, the guarded softmax recompute, dS, dQ accumulation and the
      masked scatter-accumulate into the fp32 dKV buffer.

    The guards that keep the computation finite are explicit operands in the
    IR: `smla.index_mask` (slot validity), `smla.row_live` (dead-row
    detection) and the `clamp` of `smla.softmax`. The pass
    `smla-verify-guards` refuses IR in which a gather, a scatter or an
    exponential is unguarded.
  }];
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect"
  ];
}

class SMLA_Op<string mnemonic, list<Trait> traits = []>
    : Op<SMLA_Dialect, mnemonic, traits>;

#endif // SMLA_DIALECT_SMLA_IR_SMLADIALECT_TD
