//===- SMLAAttrs.td - smla attributes and enums ------------*- tablegen -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLA_IR_SMLAATTRS_TD
#define SMLA_DIALECT_SMLA_IR_SMLAATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "smla/Dialect/SMLA/IR/SMLADialect.td"

def SMLA_LseBase2 : I32EnumAttrCase<"Base2", 2, "base2">;
def SMLA_LseBaseE : I32EnumAttrCase<"BaseE", 1, "natural">;
def SMLA_LseBase : I32EnumAttr<"LseBase",
    "base of the forward's log-sum-exp",
    [SMLA_LseBase2, SMLA_LseBaseE]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::smla";
}

def SMLA_LseBaseAttr : EnumAttr<SMLA_Dialect, SMLA_LseBase, "lse_base">;

def SMLA_ConfigAttr : AttrDef<SMLA_Dialect, "Config"> {
  let mnemonic = "config";
  let summary = "Static configuration of one sparse-MLA backward kernel";
  let description = [{
    Everything about a sparse-MLA backward that is fixed at compile time.
    T (query tokens), S_kv (keys) and K (top-k) are run-time sizes.

    * `d`, `dt`: widths of the value part and of the rope tail of q/k
      (GLM-5.2: 512 and 64); both multiples of 16, `d >= 16`.
    * `heads`, `groups`: H query heads and G kv groups; head h reads group
      h / (H/G); H must be divisible by G.
    * `block`: top-k slots processed per step, a multiple of 16 in [16, 256].
      Any top-k >= 1 is accepted at run time: the tail block is masked.
    * `lseBase`: `base2` (TileLang/Slime: lse = log2 sum exp2(s*scale*log2e))
      or `natural` (FlashMLA, cuDNN).
    * `positions`: whether absolute query positions are given (context
      parallelism, packed sequences); then slot j of token t is valid only if
      `indices[t, g, j] <= q_positions[t]`.
    * `dqType`, `dkvType`: output element types, bf16 or f32 (dKV is always
      accumulated in f32).
    * `headBlocks` (optional, default 1): the heads of one group are split
      into this many blocks of Hb = H / G / headBlocks heads, each processed
      as its own step (its own CTA on the GPU, so that the per-step tiles of
      a large H fit in shared memory). Must divide H / G. Every head block
      re-gathers its group's keys and adds its own share to dKV; only the
      first block of a group counts invalid slots.
    * `tokens` (optional, default 1): consecutive query tokens folded into
      one step (key sharing). With `tokens = n`, q, o, dout, lse and dq are
      given folded, n tokens to a row: [T / n, H, ...] where H = `heads`
      counts the rows of all n tokens (n times the heads per token); row r
      of folded token t belongs to token n*t + r / (H/n). `indices` and
      `positions` stay per token ([T, G, K], [T]). The step walks the slots
      of its n index rows in lockstep: slot j gathers the key of the first
      row whose slot j is valid, each token's rows are masked by their own
      row, and the block's dKV is reduced once for all of them. Only n = 2
      with groups = 1 and headBlocks = 1 is supported. Callers hand it
      aligned rows: slot j of both rows holds the same key or -1.

    Example:
    ```mlir
    #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64,
                 lseBase = base2, positions = true, dqType = bf16,
                 dkvType = bf16>
    ```
  }];
  let parameters = (ins "int64_t":$d, "int64_t":$dt, "int64_t":$heads,
                        "int64_t":$groups, "int64_t":$block,
                        EnumParameter<SMLA_LseBase>:$lseBase,
                        "bool":$positions, "::mlir::Type":$dqType,
                        "::mlir::Type":$dkvType,
                        DefaultValuedParameter<"int64_t", "1">:$headBlocks,
                        DefaultValuedParameter<"int64_t", "1">:$tokens);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Heads that read one kv group (H / G).
    int64_t getHeadsPerGroup() const { return getHeads() / getGroups(); }
    /// Heads processed in one step (H / G / headBlocks).
    int64_t getHeadsPerBlock() const {
      return getHeadsPerGroup() / getHeadBlocks();
    }
    /// Heads of one token (H / tokens).
    int64_t getHeadsPerToken() const { return getHeads() / getTokens(); }
    /// Width of q and k rows (D + Dt).
    int64_t getQkWidth() const { return getD() + getDt(); }
  }];
}

#endif // SMLA_DIALECT_SMLA_IR_SMLAATTRS_TD
