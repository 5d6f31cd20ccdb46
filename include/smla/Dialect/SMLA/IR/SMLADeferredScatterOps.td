//===- SMLADeferredScatterOps.td - deferred dKV scatter -*- tablegen -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// The ops smla-defer-scatter splits a scatter_dkv into (GPU only): the
// pack of a block's dS and P, the column chunks that reduce them during
// the next block, and the mbarrier set-up of the cluster form. Included by
// SMLAOps.td at their place in the dialect's reference.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLA_IR_SMLADEFERREDSCATTEROPS_TD
#define SMLA_DIALECT_SMLA_IR_SMLADEFERREDSCATTEROPS_TD

def SMLA_PackDkvOp
    : SMLA_Op<"pack_dkv", [AllTypesMatch<["ds", "probs"]>]> {
  let summary = "Pack one block's dS and P for a deferred dKV scatter";
  let description = [{
    The first half of a `scatter_dkv` that `smla-defer-scatter` splits so
    that its products and reductions run during the next block:
    `packed[0, j, h] = bf16(ds[h, j])`, `packed[1, j, h] = bf16(probs[h, j])`
    and `slots[j] = mask[j] ? idx[j] : -1`. GPU only: the bytes of each
    [B x Hb] half are in wgmma's canonical K-major layout (core matrices of
    8 slots x 8 rows, 128 contiguous bytes each, the Hb / 8 row groups
    B * 16 bytes apart). The mask is required: a masked lane's slot is -1
    and never becomes an address. With `cluster(%partner, %bars, %count)`
    each thread also sends what it packs to the same place of the
    partner CTA's `partner[count % 2]` (st.async, completing the partner's
    mbarrier `bars[count % 2]`), thread 0 arms its own `bars[count % 2]`
    for the partner's tiles of the same block, and `count` (a per-thread
    count of the packs, zero at the kernel's start) goes up by one.

    ```mlir
    smla.pack_dkv %ds, %p rows(%idx) mask(%m : vector<64xi1>)
        into %packed, %slots
        : memref<32x64xf32>, vector<64xi32>, memref<2x64x32xbf16>,
          memref<64xi32>
    ```
  }];
  let arguments = (ins SMLA_F32Tile:$ds, SMLA_F32Tile:$probs,
      SMLA_IndexVector:$indices, SMLA_MaskVector:$mask,
      MemRefRankOf<[BF16], [3]>:$packed, MemRefRankOf<[I32], [1]>:$slots,
      Variadic<AnyMemRef>:$cluster);
  let assemblyFormat = [{
    $ds `,` $probs `rows` `(` $indices `)` `mask` `(` $mask `:` type($mask)
    `)` `into` $packed `,` $slots (`cluster` `(` $cluster^ `:`
    type($cluster) `)`)? attr-dict `:` type($ds) `,`
    type($indices) `,` type($packed) `,` type($slots)
  }];
  let hasVerifier = 1;
}

def SMLA_ScatterPackedOp : SMLA_Op<"scatter_packed"> {
  let summary = "One column chunk of a deferred dKV scatter";
  let description = [{
    The second half of a split `scatter_dkv`: for every slot j with
    `slots[j] >= 0` and the columns c of chunk `chunk` of `chunks` (the
    q width W in equal parts, `[chunk * W / chunks, (chunk + 1) * W /
    chunks)`):
    `dkv[slots[j], g, c] += sum_h packed[0, j, h] * q[t, hb*Hb + h, c]
                           + (c < D ? sum_h packed[1, j, h] * dout[t, hb*Hb + h, c] : 0)`.
    `packed` and `slots` are what a `pack_dkv` wrote (possibly a block
    earlier); a slot of -1 adds nothing and is never an address.

    With `cluster(%rows, %partner, %bars, %count)` the kernel runs the two
    head blocks of a token as a cluster of two CTAs (rank r = head block),
    and the chunk covers only the columns [r W / 2 + c W / (2 chunks), +
    W / (2 chunks)) of the slots, for the rows of both: its own from
    `packed` and its staged q and do, the partner's from `partner` (the
    partner's packed dS^T and P^T, [2 blocks][2][B][Hb], sent by the
    partner's pack_dkv) and `rows` (the partner's q and do rows for this
    CTA's column half, a canonical [2 Hb, W / 2] tile). Chunk 0 first
    waits on `bars[b % 2]` for block b's partner tiles (b = count - 1,
    none while count is 0).

    ```mlir
    smla.scatter_packed %packed, %slots, %q, %do[%t, %hb] into %dkv[%g]
        {chunk = 0 : i64, chunks = 3 : i64}
        : memref<2x64x32xbf16>, memref<64xi32>, memref<?x32x576xbf16>,
          memref<?x32x512xbf16>, memref<?x1x576xf32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[BF16], [3]>:$packed,
      MemRefRankOf<[I32], [1]>:$slots, SMLA_Bf16Rank3:$q,
      SMLA_Bf16Rank3:$dout, Index:$token, Index:$head_block,
      MemRefRankOf<[F32], [3]>:$dkv, Index:$group,
      Variadic<AnyMemRef>:$cluster, I64Attr:$chunk, I64Attr:$chunks);
  let assemblyFormat = [{
    $packed `,` $slots `,` $q `,` $dout `[` $token `,` $head_block `]`
    `into` $dkv `[` $group `]` (`cluster` `(` $cluster^ `:` type($cluster)
    `)`)? attr-dict `:` type($packed) `,`
    type($slots) `,` type($q) `,` type($dout) `,` type($dkv)
  }];
  let hasVerifier = 1;
}

def SMLA_ClusterInitOp : SMLA_Op<"cluster_init"> {
  let summary = "Initialise the mbarriers of a cluster hand-off";
  let description = [{
    Initialises each mbarrier of `bars` (a workgroup array of i64, arrival
    count 1) and orders that before any other CTA of the cluster can
    complete a transaction on them: `fence.mbarrier_init.release.cluster`,
    then a cluster barrier (arrive.release, wait.acquire). Every thread of
    every CTA of the cluster must reach it once, before any `pack_dkv` with
    a `cluster` operand. GPU only: `smla-defer-scatter` emits it at the
    start of a kernel whose head blocks run as clusters of two.

    ```mlir
    smla.cluster_init %bars : memref<2xi64, #gpu.address_space<workgroup>>
    ```
  }];
  let arguments = (ins MemRefRankOf<[I64], [1]>:$bars);
  let assemblyFormat = [{ $bars attr-dict `:` type($bars) }];
  let hasVerifier = 1;
}

#endif // SMLA_DIALECT_SMLA_IR_SMLADEFERREDSCATTEROPS_TD
