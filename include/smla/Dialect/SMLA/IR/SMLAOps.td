//===- SMLAOps.td - smla operations ------------------------*- tablegen -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLA_IR_SMLAOPS_TD
#define SMLA_DIALECT_SMLA_IR_SMLAOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "smla/Dialect/SMLA/IR/SMLADialect.td"
include "smla/Dialect/SMLA/IR/SMLAAttrs.td"

// Operand classes used by several ops.
def SMLA_Bf16Rank3 : MemRefRankOf<[BF16], [3]>;
def SMLA_F32Tile : MemRefRankOf<[F32], [2]>;
// Gathered K/V rows: kv is bf16, so a bf16 tile holds them exactly.
def SMLA_KeyTile : MemRefRankOf<[BF16, F32], [2]>;
def SMLA_IndexVector : VectorOfRankAndType<[1], [I32]>;
def SMLA_MaskVector : VectorOfRankAndType<[1], [I1]>;
def SMLA_Counters : MemRefRankOf<[I64], [1]>;

//===----------------------------------------------------------------------===//
// The whole computation.
//===----------------------------------------------------------------------===//

def SMLA_SparseAttentionBwdOp
    : SMLA_Op<"sparse_attention_bwd", [AttrSizedOperandSegments]> {
  let summary = "Backward pass of sparse top-k multi-latent attention";
  let description = [{
    The whole backward as a user states it, in destination style. With
    H = `heads`, G = `groups`, W = D + Dt and K the run-time top-k:

    | operand | shape | element |
    | --- | --- | --- |
    | q | [T, H, W] | bf16 |
    | kv | [S_kv, G, W] (V is kv[..., :D]) | bf16 |
    | o, dout | [T, H, D] | bf16 |
    | indices | [T, G, K] | i32 |
    | lse | [T, H] | f32 |
    | positions (iff config.positions) | [T] | i32 |
    | dq | [T, H, W] | config.dqType |
    | dkv_accum | [S_kv, G, W] | f32 (overwritten with the result) |
    | dkv (iff config.dkvType is bf16) | [S_kv, G, W] | bf16 |
    | counters (optional) | [4] | i64: invalid slots, dead rows, clamps, non-finite rows |
    | delta (optional) | [T, H] | f32: Delta given by the caller (below) |
    | topk_length (optional) | [T] | i32: slots per token (below) |

    Slot (t, g, j) is valid iff `0 <= indices[t,g,j] < S_kv` and, with
    positions, `indices[t,g,j] <= positions[t]`; an invalid slot is never
    dereferenced. For valid slots of a live row, with x2 the exponent in
    base 2: `P = exp2(min(s*scale*log2e - lse2, clamp))`,
    `dS = P*(dP - Delta)*scale`, `dq += dS*k`,
    `dkv[idx] += sum_h dS*q`, `dkv[idx, :D] += sum_h P*do`. A row whose lse
    is not finite, or that has no valid slot, is dead: P = 0, its dq row is
    0, and it adds nothing to dkv. Finite inputs of extreme magnitude can
    still overflow f32: `counters[3]` counts the rows of the results (dq
    rows (t, h) and rows (s, g) of dkv, or of dkv_accum without dkv) that
    hold a NaN or an Inf in their stored type.

    Delta is `rowsum(o * dout)` unless `delta` is given: then Delta is
    read from it (a caller that folds the gradient of lse into Delta,
    `Delta - grad_lse * c`, passes the folded rows). On the GPU a null
    `delta` pointer means "not given", so one kernel serves both calls.

    With `topk_length`, token t has `min(K, max(0, topk_length[t]))`
    slots: slots past that are not slots at all (never read, not counted
    as invalid), and the blocks wholly past it are not walked. Only a
    step of one token (config tokens = 1) takes it.

    Example:
    ```mlir
    smla.sparse_attention_bwd
        q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>)
        o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>)
        indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>)
        dq(%dq : memref<?x16x576xbf16>)
        dkv_accum(%acc : memref<?x1x576xf32>)
        dkv(%dkv : memref<?x1x576xbf16>)
        {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1,
           block = 64, lseBase = base2, positions = false, dqType = bf16,
           dkvType = bf16>, sm_scale = 0.0416666679 : f32}
    ```
  }];
  let arguments = (ins SMLA_Bf16Rank3:$q, SMLA_Bf16Rank3:$kv,
      SMLA_Bf16Rank3:$o, SMLA_Bf16Rank3:$dout,
      MemRefRankOf<[I32], [3]>:$indices, MemRefRankOf<[F32], [2]>:$lse,
      Optional<MemRefRankOf<[I32], [1]>>:$positions,
      MemRefRankOf<[BF16, F32], [3]>:$dq,
      MemRefRankOf<[F32], [3]>:$dkv_accum,
      Optional<SMLA_Bf16Rank3>:$dkv,
      Optional<SMLA_Counters>:$counters,
      Optional<MemRefRankOf<[F32], [2]>>:$delta,
      Optional<MemRefRankOf<[I32], [1]>>:$topk_length,
      SMLA_ConfigAttr:$config, F32Attr:$sm_scale);
  let assemblyFormat = [{
    `q` `(` $q `:` type($q) `)` `kv` `(` $kv `:` type($kv) `)`
    `o` `(` $o `:` type($o) `)` `dout` `(` $dout `:` type($dout) `)`
    `indices` `(` $indices `:` type($indices) `)`
    `lse` `(` $lse `:` type($lse) `)`
    (`positions` `(` $positions^ `:` type($positions) `)`)?
    `dq` `(` $dq `:` type($dq) `)`
    `dkv_accum` `(` $dkv_accum `:` type($dkv_accum) `)`
    (`dkv` `(` $dkv^ `:` type($dkv) `)`)?
    (`counters` `(` $counters^ `:` type($counters) `)`)?
    (`delta` `(` $delta^ `:` type($delta) `)`)?
    (`topk_length` `(` $topk_length^ `:` type($topk_length) `)`)?
    attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Tile-level ops. Each works on one query token `t`. Ops that read kv or
// the indices take the kv group `g`; ops that read per-head rows take a head
// block `hb`: heads hb*Hb .. hb*Hb + Hb - 1, where Hb is the op's row count
// (H / G, or H / G / headBlocks when the config splits heads; then
// hb = g*headBlocks + s). B = block slots, W = D + Dt.
//===----------------------------------------------------------------------===//

def SMLA_DeltaOp : SMLA_Op<"delta"> {
  let summary = "Delta = rowsum(o * do) for the heads of one head block";
  let description = [{
    `delta[h] = sum_c o[t, hb*Hb + h, c] * dout[t, hb*Hb + h, c]` in f32,
    for h < Hb where Hb is the length of `delta`. With `given` ([T, H],
    the caller's Delta), `delta[h] = given[t, hb*Hb + h]` instead; on the
    GPU only where `given`'s pointer is not null, so a kernel computes
    Delta itself when the caller passes none.

    ```mlir
    smla.delta %o, %do[%t, %g] into %delta
        : memref<?x16x512xbf16>, memref<?x16x512xbf16>, memref<16xf32>
    smla.delta %o, %do[%t, %g] given(%d : memref<?x16xf32>) into %delta
        : memref<?x16x512xbf16>, memref<?x16x512xbf16>, memref<16xf32>
    ```
  }];
  let arguments = (ins SMLA_Bf16Rank3:$o, SMLA_Bf16Rank3:$dout, Index:$token,
      Index:$head_block, Optional<MemRefRankOf<[F32], [2]>>:$given,
      MemRefRankOf<[F32], [1]>:$delta);
  let assemblyFormat = [{
    $o `,` $dout `[` $token `,` $head_block `]`
    (`given` `(` $given^ `:` type($given) `)`)? `into` $delta attr-dict `:`
    type($o) `,` type($dout) `,` type($delta)
  }];
  let hasVerifier = 1;
}

def SMLA_IndexLoadOp : SMLA_Op<"index_load", [AttrSizedOperandSegments]> {
  let summary = "Load one block of top-k indices";
  let description = [{
    Lane j of the result is `indices[t, g, offset + j]` when
    `offset + j < K` (K = dim 2 of `indices`, or `length` when given, at
    most K) and -1 otherwise: the tail block is never read past. `limit`, when present, is the absolute position
    of token t; it travels with the indices so that the mask built from them
    can apply the causal rule `idx <= limit`. `counters`, when present, is
    the guard counter buffer the guards built from this block report to.

    ```mlir
    %idx = smla.index_load %indices[%t, %g, %k0] limit %pos
        : memref<?x1x?xi32> -> vector<64xi32>
    %idx2 = smla.index_load %indices[%t, %g, %k0] length %n
        : memref<?x1x?xi32> -> vector<64xi32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[I32], [3]>:$indices, Index:$token,
      Index:$group, Index:$offset, Optional<I32>:$limit,
      Optional<Index>:$length, Optional<SMLA_Counters>:$counters);
  let results = (outs SMLA_IndexVector:$result);
  let assemblyFormat = [{
    $indices `[` $token `,` $group `,` $offset `]` (`limit` $limit^)?
    (`length` $length^)?
    (`counters` `(` $counters^ `:` type($counters) `)`)?
    attr-dict `:` type($indices) `->` type($result)
  }];
}

def SMLA_IndexMaskOp : SMLA_Op<"index_mask", [AttrSizedOperandSegments]> {
  let summary = "Validity mask of one block of top-k slots";
  let description = [{
    `mask[j] = j < lanes && 0 <= idx[j] && idx[j] < bound
               && (no limit || idx[j] <= limit)`.
    `bound` is the row count of the tensor the mask protects (S_kv); `lanes`
    is the number of real slots in the block (`min(B, K - offset)`). With
    `counters`, `counters[0]` grows by the number of real but invalid slots.

    ```mlir
    %m = smla.index_mask %idx below %S lanes %n limit %pos
        : vector<64xi32> -> vector<64xi1>
    ```
  }];
  let arguments = (ins SMLA_IndexVector:$indices, Index:$bound, Index:$lanes,
      Optional<I32>:$limit, Optional<SMLA_Counters>:$counters);
  let results = (outs SMLA_MaskVector:$mask);
  let assemblyFormat = [{
    $indices `below` $bound `lanes` $lanes (`limit` $limit^)?
    (`counters` `(` $counters^ `:` type($counters) `)`)?
    attr-dict `:` type($indices) `->` type($mask)
  }];
  let hasVerifier = 1;
}

def SMLA_IndexPairOp : SMLA_Op<"index_pair", [Pure,
    AllTypesMatch<["first", "second", "indices"]>,
    AllTypesMatch<["first_mask", "second_mask", "mask", "second_keeps"]>]> {
  let summary = "One block of slots shared by two tokens (key sharing)";
  let description = [{
    The slots of a step that folds two tokens (config `tokens = 2`):
    `indices[j] = first_mask[j] ? first[j] : second[j]`,
    `mask[j] = first_mask[j] || second_mask[j]` and
    `second_keeps[j] = second_mask[j] && (!first_mask[j] || first[j] ==
    second[j])`, where `first` / `second` are the two tokens' index blocks
    at the same offset and the masks their `smla.index_mask`s. A lane valid
    for either token is a valid row of the tensor both masks protect. The
    softmax masks the first token's rows with `first_mask` and the second
    token's with `second_keeps`: a token's rows see lane j only if its own
    mask validated the very key the lane holds. For aligned rows (slot j of
    both holds the same key or -1) `second_keeps` is `second_mask`.

    ```mlir
    %idx, %m, %keep = smla.index_pair %a mask(%ma), %b mask(%mb)
        : vector<64xi32>, vector<64xi1>
    ```
  }];
  let arguments = (ins SMLA_IndexVector:$first, SMLA_MaskVector:$first_mask,
      SMLA_IndexVector:$second, SMLA_MaskVector:$second_mask);
  let results = (outs SMLA_IndexVector:$indices, SMLA_MaskVector:$mask,
      SMLA_MaskVector:$second_keeps);
  let assemblyFormat = [{
    $first `mask` `(` $first_mask `)` `,` $second `mask` `(` $second_mask `)`
    attr-dict `:` type($first) `,` type($first_mask)
  }];
  let builders = [OpBuilder<(ins "Value":$first, "Value":$firstMask,
      "Value":$second, "Value":$secondMask), [{
    build($_builder, $_state, first.getType(), firstMask.getType(),
          firstMask.getType(), first, firstMask, second, secondMask);
  }]>];
  let hasVerifier = 1;
}

def SMLA_PairUnionOp : SMLA_Op<"pair_union"> {
  let summary = "Aligned index rows of one token pair (key sharing)";
  let description = [{
    The index rows a `tokens = 2` kernel walks for tokens 2p and 2p + 1
    (`pair` = p), built by one CTA. With K = dim 2 of `indices`, a_i and
    b_j the two rows (group 0) and "valid" meaning 0 <= key < `bound`,
    the aligned layout is:

    * `rows[2p, 0, i]` = a_i if valid, else -1; `rows[2p+1, 0, i]` = a_i
      if valid and also in b's row, else -1 (i < K);
    * the valid b_j not in a's row, in row order, at slots K + r:
      `rows[2p+1, 0, K + r]` = b_j and `rows[2p, 0, K + r]` = -1;
    * slots K + c .. W - 1 of both rows are -1, where c is the number of
      those keys, W = dim 2 of `rows`, and `lengths[p]` = K + c.

    Where a valid key repeats within a row, or K exceeds what the scratch
    holds (4K > len(keys), or K >= len(ranks) - 1: the last entry of
    `ranks` holds the repeat flag), the rows take the disjoint layout
    instead: `rows[2p, 0, i]` as above and -1 from K on, `rows[2p+1, 0,
    i]` = -1 below K, `rows[2p+1, 0, K + j]` = b_j if valid, else -1, and
    -1 from 2K on; `lengths[p]` = 2K.

    Either way every slot holds the same key in both rows or -1 in one of
    them, each row holds exactly its token's valid keys (with their
    repeats), and every slot from `lengths[p]` on is -1 in both rows: the
    bwd kernel's CTA of pair p walks only the blocks below `lengths[p]`.
    Dim 2 of `rows` (W) must be >= 2K; a W beyond 2K lets the rows of
    token t live in dq's memory of token t (python/csrc/TokenPairs.h).
    Scratch (workgroup memory on the GPU):
    `keys` / `positions` an open-addressing hash table (length a power of
    two), `ranks` one entry per slot, `partials` one per thread of the CTA.

    ```mlir
    smla.pair_union %idx[%p] below %S into %rows, %lengths
        scratch(%keys, %pos, %ranks, %partials)
        : memref<?x1x?xi32>, memref<?x1x?xi32>, memref<?xi32>,
          memref<8192xi32>, memref<8192xi32>, memref<4096xi32>,
          memref<512xi32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[I32], [3]>:$indices, Index:$pair,
      Index:$bound, MemRefRankOf<[I32], [3]>:$rows,
      MemRefRankOf<[I32], [1]>:$lengths, MemRefRankOf<[I32], [1]>:$keys,
      MemRefRankOf<[I32], [1]>:$positions, MemRefRankOf<[I32], [1]>:$ranks,
      MemRefRankOf<[I32], [1]>:$partials);
  let assemblyFormat = [{
    $indices `[` $pair `]` `below` $bound `into` $rows `,` $lengths
    `scratch` `(` $keys `,` $positions `,` $ranks `,` $partials `)`
    attr-dict `:` type($indices) `,` type($rows) `,` type($lengths) `,`
    type($keys) `,` type($positions) `,` type($ranks) `,` type($partials)
  }];
  let hasVerifier = 1;
}

def SMLA_RowLiveOp : SMLA_Op<"row_live"> {
  let summary = "Dead-row detection: which heads have a finite lse";
  let description = [{
    `live[h] = isfinite(lse[t, hb*Hb + h])` for h < Hb (the result length).
    +inf, -inf and NaN are all dead. With `counters`, `counters[1]` grows by
    the number of dead rows.

    ```mlir
    %live = smla.row_live %lse[%t, %g] : memref<?x16xf32> -> vector<16xi1>
    ```
  }];
  let arguments = (ins MemRefRankOf<[F32], [2]>:$lse, Index:$token,
      Index:$head_block, Optional<SMLA_Counters>:$counters);
  let results = (outs SMLA_MaskVector:$live);
  let assemblyFormat = [{
    $lse `[` $token `,` $head_block `]`
    (`counters` `(` $counters^ `:` type($counters) `)`)?
    attr-dict `:` type($lse) `->` type($live)
  }];
}

def SMLA_GatherOp : SMLA_Op<"gather"> {
  let summary = "Masked gather of K/V rows";
  let description = [{
    `tile[j, c] = mask[j] ? kv[idx[j], g, c] : 0` for c < W, the kv row width
    (bf16 or f32; exact either way since kv is bf16). The tile may be wider
    than W: the GPU mapping pads its rows by 16 bytes so that the block
    products read it without shared-memory bank conflicts; columns >= W are
    neither written nor read. A masked lane is never turned into an address. Without `mask` the op is unguarded and
    `smla-verify-guards` rejects it.

    The GPU mapping may split a gather in two (`smla-prefetch-keys`): an
    `issue_only` gather starts the copies (cp.async) of a later block and
    returns, and the `wait_only` gather where the block is used completes
    them: the tile holds its rows after it, as if the whole gather ran
    there. Both carry the block's indices and mask; only the issue reads
    them. The tile must not be touched between the two.

    ```mlir
    smla.gather %kv[%g] rows(%idx) mask(%m : vector<64xi1>) into %tile
        : memref<?x1x576xbf16>, vector<64xi32>, memref<64x576xbf16>
    ```
  }];
  let arguments = (ins SMLA_Bf16Rank3:$kv, Index:$group,
      SMLA_IndexVector:$indices, Optional<SMLA_MaskVector>:$mask,
      SMLA_KeyTile:$tile, UnitAttr:$issue_only, UnitAttr:$wait_only);
  let assemblyFormat = [{
    $kv `[` $group `]` `rows` `(` $indices `)`
    (`mask` `(` $mask^ `:` type($mask) `)`)? `into` $tile attr-dict `:`
    type($kv) `,` type($indices) `,` type($tile)
  }];
  let hasVerifier = 1;
}

def SMLA_TileDotOp : SMLA_Op<"tile_dot"> {
  let summary = "Scores (q.k) or dP (do.v) of one block";
  let description = [{
    `result[h, j] = sum_{c < W} lhs[t, hb*Hb + h, c] * tile[j, c]` in f32,
    where W is the width of `lhs`: the full q width for scores, D for dP.

    ```mlir
    smla.tile_dot %q[%t, %g], %tile into %s
        : memref<?x16x576xbf16>, memref<64x576xbf16>, memref<16x64xf32>
    ```
  }];
  let arguments = (ins SMLA_Bf16Rank3:$lhs, Index:$token, Index:$head_block,
      SMLA_KeyTile:$tile, SMLA_F32Tile:$result);
  let assemblyFormat = [{
    $lhs `[` $token `,` $head_block `]` `,` $tile `into` $result attr-dict `:`
    type($lhs) `,` type($tile) `,` type($result)
  }];
  let hasVerifier = 1;
}

def SMLA_SoftmaxOp : SMLA_Op<"softmax", [AttrSizedOperandSegments]> {
  let summary = "Softmax recompute against the forward's lse";
  let description = [{
    With `x2 = s * scale * log2e - lse2` (lse2 = lse for `base2`,
    lse * log2e for `natural`):

    * unguarded: `p = exp2(x2)`; `smla-verify-guards` rejects this form;
    * guarded (`mask`, `live` and `clamp` present):
      `p[h, j] = (mask[j] && live[h]) ? exp2(min(x2, clamp)) : 0`, a select,
      never a multiply by the mask, so inf * 0 cannot arise. With `counters`,
      `counters[2]` grows by the number of selected lanes with x2 > clamp.
    * with `pair_mask` (a step of two tokens, `smla.index_pair`): the rows
      h >= Hb/2 belong to the second token and use `pair_mask[j]` in place
      of `mask[j]` (the pair's `second_keeps`).

    ```mlir
    smla.softmax %s, %lse[%t, %g] mask(%m : vector<64xi1>)
        live(%live : vector<16xi1>) into %p
        {base = #smla.lse_base<base2>, clamp = 3.200000e+01 : f32,
         scale = 0.0416666679 : f32}
        : memref<16x64xf32>, memref<?x16xf32>, memref<16x64xf32>
    ```
  }];
  let arguments = (ins SMLA_F32Tile:$scores, MemRefRankOf<[F32], [2]>:$lse,
      Index:$token, Index:$head_block, Optional<SMLA_MaskVector>:$mask,
      Optional<SMLA_MaskVector>:$pair_mask,
      Optional<SMLA_MaskVector>:$live, Optional<SMLA_Counters>:$counters,
      SMLA_F32Tile:$probs, F32Attr:$scale, SMLA_LseBaseAttr:$base,
      OptionalAttr<F32Attr>:$clamp);
  let assemblyFormat = [{
    $scores `,` $lse `[` $token `,` $head_block `]`
    (`mask` `(` $mask^ `:` type($mask) `)`)?
    (`pair_mask` `(` $pair_mask^ `:` type($pair_mask) `)`)?
    (`live` `(` $live^ `:` type($live) `)`)?
    (`counters` `(` $counters^ `:` type($counters) `)`)?
    `into` $probs attr-dict `:` type($scores) `,` type($lse) `,` type($probs)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// True when every guard the contract asks for is attached.
    bool isGuarded() { return getMask() && getLive() && getClamp(); }
  }];
}

def SMLA_DScoresOp : SMLA_Op<"dscores"> {
  let summary = "dS = P * (dP - Delta) * scale";
  let description = [{
    `ds[h, j] = p[h, j] != 0 ? p[h, j] * (dp[h, j] - delta[h]) * scale : 0`.
    The select keeps lanes that the softmax guard zeroed exactly zero even if
    dP or Delta were not finite.

    ```mlir
    smla.dscores %p, %dp, %delta into %ds {scale = 0.0416666679 : f32}
        : memref<16x64xf32>, memref<16x64xf32>, memref<16xf32>,
          memref<16x64xf32>
    ```
  }];
  let arguments = (ins SMLA_F32Tile:$probs, SMLA_F32Tile:$dp,
      MemRefRankOf<[F32], [1]>:$delta, SMLA_F32Tile:$ds, F32Attr:$scale);
  let assemblyFormat = [{
    $probs `,` $dp `,` $delta `into` $ds attr-dict `:` type($probs) `,`
    type($dp) `,` type($delta) `,` type($ds)
  }];
  let hasVerifier = 1;
}

def SMLA_DqAccumulateOp : SMLA_Op<"dq_accumulate"> {
  let summary = "dQ += dS * K for one block";
  let description = [{
    `acc[h, c] += sum_j ds[h, j] * tile[j, c]`. Masked lanes have `ds = 0`
    and a zero-filled tile row.

    ```mlir
    smla.dq_accumulate %ds, %tile into %acc
        : memref<16x64xf32>, memref<64x576xbf16>, memref<16x576xf32>
    ```
  }];
  let arguments = (ins SMLA_F32Tile:$ds, SMLA_KeyTile:$tile,
      SMLA_F32Tile:$acc);
  let assemblyFormat = [{
    $ds `,` $tile `into` $acc attr-dict `:` type($ds) `,` type($tile) `,`
    type($acc)
  }];
  let hasVerifier = 1;
}

def SMLA_DqPackedOp : SMLA_Op<"dq_packed"> {
  let summary = "dQ += dS * K for one block, dS from a pack_dkv";
  let description = [{
    `acc[h, c] += sum_j packed[0, j, h] * tile[j, c]`: the `dq_accumulate`
    of a block whose dS a `pack_dkv` has already rounded to bf16 and packed
    (`smla-defer-scatter` moves the pack before dQ). GPU only: the lowering
    runs dQ^T = K^T dS^T on wgmma, with the key tile in wgmma's 128-byte
    swizzle (`smla.swizzled_keys`). Masked lanes have `ds = 0` and a
    zero-filled tile row.

    ```mlir
    smla.dq_packed %packed, %tile into %acc
        : memref<2x64x32xbf16>, memref<64x576xbf16>, memref<32x576xf32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[BF16], [3]>:$packed, SMLA_KeyTile:$tile,
      SMLA_F32Tile:$acc);
  let assemblyFormat = [{
    $packed `,` $tile `into` $acc attr-dict `:` type($packed) `,`
    type($tile) `,` type($acc)
  }];
  let hasVerifier = 1;
}

def SMLA_ScatterDkvOp
    : SMLA_Op<"scatter_dkv", [AllTypesMatch<["ds", "probs"]>]> {
  let summary = "Masked scatter-accumulate of one block into fp32 dKV";
  let description = [{
    For every lane j with `mask[j]`, and c < W:
    `dkv[idx[j], g, c] += sum_h ds[h, j] * q[t, hb*Hb + h, c]
                         + (c < D ? sum_h p[h, j] * dout[t, hb*Hb + h, c] : 0)`
    with h < Hb (the rows of `ds`); the heads of block hb must belong to kv
    group g. A masked lane writes nothing. Without `mask` the op is
    unguarded and `smla-verify-guards` rejects it.

    ```mlir
    smla.scatter_dkv %ds, %p, %q, %do[%t, %hb] rows(%idx)
        mask(%m : vector<64xi1>) into %dkv[%g]
        : memref<16x64xf32>, memref<?x16x576xbf16>, memref<?x16x512xbf16>,
          vector<64xi32>, memref<?x1x576xf32>
    ```
  }];
  let arguments = (ins SMLA_F32Tile:$ds, SMLA_F32Tile:$probs,
      SMLA_Bf16Rank3:$q, SMLA_Bf16Rank3:$dout, Index:$token,
      Index:$head_block, SMLA_IndexVector:$indices,
      Optional<SMLA_MaskVector>:$mask, MemRefRankOf<[F32], [3]>:$dkv,
      Index:$group);
  let assemblyFormat = [{
    $ds `,` $probs `,` $q `,` $dout `[` $token `,` $head_block `]`
    `rows` `(` $indices `)` (`mask` `(` $mask^ `:` type($mask) `)`)?
    `into` $dkv `[` $group `]` attr-dict `:` type($ds) `,` type($q) `,` type($dout) `,`
    type($indices) `,` type($dkv)
  }];
  let hasVerifier = 1;
}

include "smla/Dialect/SMLA/IR/SMLADeferredScatterOps.td"

def SMLA_StoreDqOp : SMLA_Op<"store_dq"> {
  let summary = "Write the dQ rows of one token and head block";
  let description = [{
    `dq[t, hb*Hb + h, c] = convert(acc[h, c])` (f32, or bf16 rounded to
    nearest even). With `counters`, `counters[3]` grows by the number of
    rows h whose stored values (after the conversion) hold a NaN or an Inf.

    ```mlir
    smla.store_dq %acc into %dq[%t, %g] counters(%c : memref<4xi64>)
        : memref<16x576xf32>, memref<?x16x576xbf16>
    ```
  }];
  let arguments = (ins SMLA_F32Tile:$acc, MemRefRankOf<[BF16, F32], [3]>:$dq,
      Index:$token, Index:$head_block, Optional<SMLA_Counters>:$counters);
  let assemblyFormat = [{
    $acc `into` $dq `[` $token `,` $head_block `]`
    (`counters` `(` $counters^ `:` type($counters) `)`)?
    attr-dict `:` type($acc) `,` type($dq)
  }];
  let hasVerifier = 1;
}

def SMLA_CastDkvOp : SMLA_Op<"cast_dkv", [AttrSizedOperandSegments]> {
  let summary = "Round the fp32 dKV accumulator to the output type";
  let description = [{
    `dkv[s, g, c] = bf16(accum[s, g, c])`, round to nearest even. With
    `counters`, `counters[3]` grows by the number of rows (s, g) of the
    result that hold a NaN or an Inf: of `dkv`, or, without `dkv` (an f32
    result, the accumulator itself), of `accum`, which is then only read.

    ```mlir
    smla.cast_dkv %acc into %dkv counters(%c : memref<4xi64>)
        : memref<?x1x576xf32>, memref<?x1x576xbf16>
    smla.cast_dkv %acc counters(%c : memref<4xi64>) : memref<?x1x576xf32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[F32], [3]>:$accum,
      Optional<SMLA_Bf16Rank3>:$dkv, Optional<SMLA_Counters>:$counters);
  let assemblyFormat = [{
    $accum (`into` $dkv^)?
    (`counters` `(` $counters^ `:` type($counters) `)`)?
    attr-dict `:` type($accum) (`,` type($dkv)^)?
  }];
  let hasVerifier = 1;
}

#endif // SMLA_DIALECT_SMLA_IR_SMLAOPS_TD
