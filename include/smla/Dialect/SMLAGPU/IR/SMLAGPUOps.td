//===- SMLAGPUOps.td - smla_gpu operations -----------------*- tablegen -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_DIALECT_SMLAGPU_IR_SMLAGPUOPS_TD
#define SMLA_DIALECT_SMLAGPU_IR_SMLAGPUOPS_TD

include "smla/Dialect/SMLAGPU/IR/SMLAGPUDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpAsmInterface.td"

def SMLAGPU_SmemTile : MemRefRankOf<[BF16], [2]>;
def SMLAGPU_Fragment : VectorOfRankAndType<[1], [F32]>;
def SMLAGPU_I32Fragment : VectorOfRankAndType<[1], [I32]>;
def SMLAGPU_Pipeline : Type<CPred<"::llvm::isa<::mlir::smla_gpu::PipelineType>($_self)">,
                            "smla_gpu pipeline", "::mlir::smla_gpu::PipelineType">;

//===----------------------------------------------------------------------===//
// Roles
//===----------------------------------------------------------------------===//

def SMLAGPU_WarpSpecializeOp : SMLAGPU_Op<"warp_specialize", [
    RecursiveMemoryEffects, NoTerminator]> {
  let summary = "Run one region per warpgroup: the CTA's roles";
  let description = [{
    Warpgroup i of the CTA (threads 128 i to 128 i + 127) runs region i,
    after setting its register budget to `registers[i]` per thread
    (`setmaxnreg`: the producer gives registers back, the consumers take
    them). `roles` names what each region does. The CTA has exactly one
    warpgroup per region; the regions communicate only through shared
    memory, pipelines and named barriers.

    ```mlir
    smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"]
        registers [32, 240, 240] {
      // producer: fills the key stages
    }, {
      // consumer: S, dP, softmax, dS, part of dQ
    }, {
      // consumer: the rest of dQ, the dKV products and reductions
    }
    ```
  }];
  let arguments = (ins StrArrayAttr:$roles, DenseI32ArrayAttr:$registers);
  let regions = (region VariadicRegion<SizedRegion<1>>:$partitions);
  let assemblyFormat = [{
    `roles` $roles `registers` $registers $partitions attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Threads per warpgroup.
    static constexpr int64_t kWarpgroupThreads = 128;
  }];
}

def SMLAGPU_ThreadInWarpgroupOp : SMLAGPU_Op<"thread_in_warpgroup", [Pure]> {
  let summary = "The thread's index within its warpgroup (0 to 127)";
  let description = [{
    Inside a region of `smla_gpu.warp_specialize`: `tid.x % 128`.

    ```mlir
    %tid = smla_gpu.thread_in_warpgroup : index
    ```
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Pipelines
//===----------------------------------------------------------------------===//

def SMLAGPU_PipelineCreateOp : SMLAGPU_Op<"pipeline_create"> {
  let summary = "Initialise a pipeline's mbarriers";
  let description = [{
    The pipeline's `2 * stages` mbarriers live in `barriers` (i64 words in
    shared memory): `full[s]` at `s`, `empty[s]` at `stages + s`. Thread 0
    of the CTA initialises them (`full` to `producers` arrivals, times two
    with `async_copies`: each producer thread arrives once for its
    cp.async copies and once for its other writes; `empty` to `consumers`)
    and the whole CTA waits at a barrier, so no role can use the pipeline
    before it exists. Outside `smla_gpu.warp_specialize`, run by every
    thread of the CTA.

    ```mlir
    %keys = smla_gpu.pipeline_create %bars
        : memref<2xi64, #gpu.address_space<workgroup>>
        -> !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    ```
  }];
  let arguments = (ins MemRefRankOf<[I64], [1]>:$barriers,
                       UnitAttr:$async_copies);
  let results = (outs SMLAGPU_Pipeline:$pipeline);
  let assemblyFormat = [{
    $barriers attr-dict `:` type($barriers) `->` qualified(type($pipeline))
  }];
  let hasVerifier = 1;
}

class SMLAGPU_PipelineUseOp<string mnemonic, string summaryText,
                            string descriptionText>
    : SMLAGPU_Op<mnemonic> {
  let summary = summaryText;
  let description = descriptionText;
  let arguments = (ins SMLAGPU_Pipeline:$pipeline, Index:$use);
  let assemblyFormat = [{
    $pipeline `[` $use `]` attr-dict `:` qualified(type($pipeline))
  }];
}

def SMLAGPU_ProducerAcquireOp : SMLAGPU_PipelineUseOp<"producer_acquire",
    "Wait until every consumer is done with a stage", [{
    Use `use` of the ring: waits on `empty[use % stages]` for the phase
    before `(use / stages) % 2`, so the first use of each stage does not wait.

    ```mlir
    smla_gpu.producer_acquire %keys[%j]
        : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    ```
  }]>;

def SMLAGPU_ProducerCommitOp : SMLAGPU_PipelineUseOp<"producer_commit",
    "Publish a stage to the consumers", [{
    Each producer thread arrives on `full[use % stages]` (release: its
    writes of the stage are visible to a consumer that waited). With
    `async_copies` on the pipeline it also arrives once its cp.async
    copies land (`cp.async.mbarrier.arrive.noinc`). A producer thread that
    stored into a stage which wgmma reads fences the async proxy first.

    ```mlir
    smla_gpu.producer_commit %keys[%j]
        : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    ```
  }]>;

def SMLAGPU_ConsumerWaitOp : SMLAGPU_PipelineUseOp<"consumer_wait",
    "Wait until a stage is full", [{
    Waits on `full[use % stages]` for phase `(use / stages) % 2`
    (acquire), then fences the async proxy so that wgmma reads what the
    producer wrote.

    ```mlir
    smla_gpu.consumer_wait %keys[%j]
        : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    ```
  }]>;

def SMLAGPU_ConsumerReleaseOp : SMLAGPU_PipelineUseOp<"consumer_release",
    "Hand a stage back to the producer", [{
    Each consumer thread arrives on `empty[use % stages]`. Every read of
    the stage must be complete: a wgmma that reads it is waited for first.

    ```mlir
    smla_gpu.consumer_release %keys[%j]
        : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    ```
  }]>;

//===----------------------------------------------------------------------===//
// Data movement into shared memory
//===----------------------------------------------------------------------===//

def SMLAGPU_GatherKeysOp : SMLAGPU_Op<"gather_keys"> {
  let summary = "Masked asynchronous gather of key rows into a stage";
  let description = [{
    Run by the 128 threads of a producer warpgroup: row `j` of `tile` (in
    the 128-byte swizzle) becomes `kv[indices[j], group, :]` where
    `mask[j]` holds, and zeros where it does not. Each 16-byte copy is a
    `cp.async` whose source row is `select(mask, index, 0)` and whose
    source size is `select(mask, 16, 0)`: a masked slot's index never
    becomes an address. The copies complete on the pipeline's `full`
    barrier of the stage (its `producer_commit`). `smla-verify-guards`
    checks the mask as it checks `smla.gather`'s.

    ```mlir
    smla_gpu.gather_keys %kv[%idx] group(%g) mask(%m : vector<64xi1>)
        into %stage : memref<?x1x576xbf16>, vector<64xi32>,
        memref<64x576xbf16, #gpu.address_space<workgroup>>
    ```
  }];
  let arguments = (ins MemRefRankOf<[BF16], [3]>:$kv,
      VectorOfRankAndType<[1], [I32]>:$indices, Index:$group,
      VectorOfRankAndType<[1], [I1]>:$mask, SMLAGPU_SmemTile:$tile);
  let assemblyFormat = [{
    $kv `[` $indices `]` `group` `(` $group `)` `mask` `(` $mask `:`
    type($mask) `)` `into` $tile attr-dict `:` type($kv) `,`
    type($indices) `,` type($tile)
  }];
  let hasVerifier = 1;
}

def SMLAGPU_WriteSlotsOp : SMLAGPU_Op<"write_slots"> {
  let summary = "The stage's slots: each key's row, or -1 where masked";
  let description = [{
    Run by a producer warpgroup: `slots[j] = (masks[0][j] && ...) ?
    indices[j] : -1`. The consumers read the slots of a stage to mask the
    softmax and to address the dKV reduction: a slot of -1 is never an
    address. `smla-verify-guards` requires one of the masks to guard each
    tensor the slots address (`smla_gpu.reduce_dkv`).

    ```mlir
    smla_gpu.write_slots %idx masks(%mkv, %mdkv : vector<64xi1>, vector<64xi1>)
        into %slots : vector<64xi32>, memref<64xi32, #gpu.address_space<workgroup>>
    ```
  }];
  let arguments = (ins VectorOfRankAndType<[1], [I32]>:$indices,
      Variadic<VectorOfRankAndType<[1], [I1]>>:$masks,
      MemRefRankOf<[I32], [1]>:$slots);
  let assemblyFormat = [{
    $indices `masks` `(` $masks `:` type($masks) `)` `into` $slots attr-dict
    `:` type($indices) `,` type($slots)
  }];
  let hasVerifier = 1;
}

def SMLAGPU_LoadRowsOp : SMLAGPU_Op<"load_rows"> {
  let summary = "Asynchronous copy of a token's rows into a tile";
  let description = [{
    Run by a producer warpgroup: row `r` of `tile` (128-byte swizzle)
    becomes `source[token, row0 + r, 0 : C]` for the tile's R rows and C
    columns, by cp.async; the copies complete on the pipeline's `full`
    barrier of the stage (`producer_commit`). The rows are a CTA's q or
    do rows, read once.

    ```mlir
    smla_gpu.load_rows %q[%t, %h0] into %qtile
        : memref<?x64x576xbf16>, memref<64x576xbf16, #gpu.address_space<workgroup>>
    ```
  }];
  let arguments = (ins MemRefRankOf<[BF16], [3]>:$source, Index:$token,
      Index:$row0, SMLAGPU_SmemTile:$tile);
  let assemblyFormat = [{
    $source `[` $token `,` $row0 `]` `into` $tile attr-dict `:`
    type($source) `,` type($tile)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Warpgroup matrix products
//===----------------------------------------------------------------------===//

def SMLAGPU_WgmmaOp : SMLAGPU_Op<"wgmma", [AttrSizedOperandSegments]> {
  let summary = "A warpgroup matrix product over a whole K extent";
  let description = [{
    `acc[m, n] (+)= sum_{k < k_extent} A[m, k] * B[k, n]` for m < 64 and
    n < `n`, bf16 operands, f32 accumulators, issued by one warpgroup as a
    chain of `wgmma.mma_async m64nNk16` between `wgmma.fence` and
    `wgmma.commit_group`. The result is the warpgroup's accumulator
    fragment (n / 2 values per thread: thread t of warp w holds rows
    16 w + (t % 32) / 4 + {0, 8} and columns 8 i + 2 (t % 4) + {0, 1}) and
    may be read only after `smla_gpu.wgmma_wait`. Without `acc` the
    product starts from zero.

    A is a shared-memory tile (`a_tile`) or this thread's register
    fragment (`a_regs`, bf16 pairs, four per 16 of k: the A layout of
    `mma.m16n8k16` per warp). From a tile, `a_major = k` reads
    `A[m, k] = a_tile[a_row + m, a_col + k]`, `a_major = mn` reads
    `A[m, k] = a_tile[a_row + k, a_col + m]`. B is a tile: `b_major = k`
    reads `B[k, n] = b_tile[b_row + n, b_col + k]`, `b_major = mn` reads
    `B[k, n] = b_tile[b_row + k, b_col + n]`. Offsets are multiples of 8
    (rows) and 64 or 16 (columns, as the 128-byte swizzle allows).

    ```mlir
    %s = smla_gpu.wgmma a_tile(%q) b_tile(%keys)
        {n = 64, k_extent = 576, a_major = "k", b_major = "k",
         a_row = 0, a_col = 0, b_row = 0, b_col = 0}
        : memref<64x576xbf16, 3>, memref<64x576xbf16, 3> -> vector<32xf32>
    ```
  }];
  let arguments = (ins Optional<SMLAGPU_SmemTile>:$a_tile,
      Optional<SMLAGPU_I32Fragment>:$a_regs, SMLAGPU_SmemTile:$b_tile,
      Optional<SMLAGPU_Fragment>:$acc, I64Attr:$n, I64Attr:$k_extent,
      StrAttr:$a_major, StrAttr:$b_major, I64Attr:$a_row, I64Attr:$a_col,
      I64Attr:$b_row, I64Attr:$b_col);
  let results = (outs SMLAGPU_Fragment:$result);
  let assemblyFormat = [{
    (`a_tile` `(` $a_tile^ `:` type($a_tile) `)`)?
    (`a_regs` `(` $a_regs^ `:` type($a_regs) `)`)?
    `b_tile` `(` $b_tile `:` type($b_tile) `)`
    (`acc` `(` $acc^ `:` type($acc) `)`)? attr-dict `->` type($result)
  }];
  let hasVerifier = 1;
}

def SMLAGPU_WgmmaWaitOp : SMLAGPU_Op<"wgmma_wait",
    [AllTypesMatch<["fragments", "results"]>]> {
  let summary = "Wait for this warpgroup's products";
  let description = [{
    `wgmma.wait_group pending`: all but the `pending` most recent product
    chains of the warpgroup are complete. Returns its operands: the
    fragments of completed products, now readable.

    ```mlir
    %s1, %p1 = smla_gpu.wgmma_wait 0, %s, %p : vector<32xf32>, vector<32xf32>
    ```
  }];
  let arguments = (ins I64Attr:$pending, Variadic<SMLAGPU_Fragment>:$fragments);
  let results = (outs Variadic<SMLAGPU_Fragment>:$results);
  let assemblyFormat = [{
    $pending (`,` $fragments^ `:` type($fragments))? attr-dict
  }];
}

def SMLAGPU_PackOperandOp : SMLAGPU_Op<"pack_operand", [Pure]> {
  let summary = "An accumulator fragment as the A operand of a product";
  let description = [{
    The m64nN accumulator fragment `source` (rows m, columns k) rounded to
    bf16 and packed as the register A operand of a product over k = N:
    `4 * N / 16` i32 registers, each two consecutive columns.

    ```mlir
    %a = smla_gpu.pack_operand %ds : vector<32xf32> -> vector<16xi32>
    ```
  }];
  let arguments = (ins SMLAGPU_Fragment:$source);
  let results = (outs SMLAGPU_I32Fragment:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fragments
//===----------------------------------------------------------------------===//

def SMLAGPU_FragmentRowsOp : SMLAGPU_Op<"fragment_rows", [Pure]> {
  let summary = "Per element of a fragment, the value of its row";
  let description = [{
    `result[i] = values[row(i)]` for the rows this thread holds in an
    m64nN accumulator fragment of `n` columns (`n / 2` elements); `values`
    is a 1-D view of at least 64 values (global or shared memory), read
    twice per thread. Used for each row's lse and Delta (rows = heads) and
    for each row's slot (rows = keys).

    ```mlir
    %lse = smla_gpu.fragment_rows %lse_row {n = 64} : memref<64xf32, strided<[1], offset: ?>> -> vector<32xf32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[F32, I32], [1]>:$values, I64Attr:$n);
  let results = (outs VectorOfRankAndType<[1], [F32, I32]>:$result);
  let assemblyFormat = "$values attr-dict `:` type($values) `->` type($result)";
  let hasVerifier = 1;
}

def SMLAGPU_FragmentColumnsOp : SMLAGPU_Op<"fragment_columns", [Pure]> {
  let summary = "Per element of a fragment, the value of its column";
  let description = [{
    `result[i] = values[column(i)]` for an m64nN accumulator fragment:
    each key's slot, for the softmax's mask (columns = keys).

    ```mlir
    %slot = smla_gpu.fragment_columns %slots {n = 64} : memref<64xi32, 3> -> vector<32xi32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[F32, I32], [1]>:$values, I64Attr:$n);
  let results = (outs VectorOfRankAndType<[1], [F32, I32]>:$result);
  let assemblyFormat = "$values attr-dict `:` type($values) `->` type($result)";
  let hasVerifier = 1;
}

def SMLAGPU_StoreFragmentOp : SMLAGPU_Op<"store_fragment"> {
  let summary = "Round a fragment to bf16 into a shared-memory tile";
  let description = [{
    `tile[row + m, col + n] = bf16(fragment[m, n])`, or with `transpose`
    `tile[row + n, col + m]`, for the warpgroup's m64nN fragment, in the
    tile's 128-byte swizzle. Transposed, the fragment's 8 x 8 matrices are
    stored whole (`stmatrix.m8n8.x4.trans`, 16 columns per instruction):
    N is a multiple of 16 and `col` of 8. Another role that reads the tile with wgmma
    is handed it through a pipeline (`producer_commit` fences the async
    proxy).

    ```mlir
    smla_gpu.store_fragment %p into %ptile {transpose, row = 0, col = 0}
        : vector<32xf32>, memref<64x64xbf16, 3>
    ```
  }];
  let arguments = (ins SMLAGPU_Fragment:$fragment, SMLAGPU_SmemTile:$tile,
      UnitAttr:$transpose, I64Attr:$row, I64Attr:$col);
  let assemblyFormat = [{
    $fragment `into` $tile attr-dict `:` type($fragment) `,` type($tile)
  }];
  let hasVerifier = 1;
}

def SMLAGPU_CountOp : SMLAGPU_Op<"count"> {
  let summary = "Add how many of a fragment's predicates hold to a counter";
  let description = [{
    `counters[slot] += |{(thread, i) : predicate[i]}|` over the warpgroup:
    a vote and a population count per warp, one atomic add by its first
    lane, skipped when `counters` is null. The guard counters of
    docs/contract.md (e.g. the clamped exponents).

    ```mlir
    smla_gpu.count %clamped into %counters[2] : vector<32xi1>, memref<3xi64>
    ```
  }];
  let arguments = (ins VectorOfRankAndType<[1], [I1]>:$predicate,
      MemRefRankOf<[I64], [1]>:$counters, I64Attr:$slot);
  let assemblyFormat = [{
    $predicate `into` $counters `[` $slot `]` attr-dict `:` type($predicate)
    `,` type($counters)
  }];
}

//===----------------------------------------------------------------------===//
// Results
//===----------------------------------------------------------------------===//

def SMLAGPU_ReduceDkvOp : SMLAGPU_Op<"reduce_dkv"> {
  let summary = "Masked fp32 reduction of a dKV fragment";
  let description = [{
    For the m64nN fragment `partial` whose rows are slots and whose
    columns are dKV columns `col` to `col + N - 1`: `dkv[slots[i], group,
    col + column(i)] += partial[i]` for every element whose slot is >= 0.
    `slots` is `smla_gpu.fragment_rows` of a stage's slots
    (`smla_gpu.write_slots`): a slot of -1 is never an address.
    Lowered to `red.global.add.v4.f32`, lanes paired so that each
    instruction adds four consecutive columns of one slot.

    ```mlir
    smla_gpu.reduce_dkv %acc slots(%rows : vector<32xi32>) into %dkv[%g]
        {col = 0} : vector<32xf32>, memref<?x1x576xf32>
    ```
  }];
  let arguments = (ins SMLAGPU_Fragment:$partial, SMLAGPU_I32Fragment:$slots,
      MemRefRankOf<[F32], [3]>:$dkv, Index:$group, I64Attr:$col);
  let assemblyFormat = [{
    $partial `slots` `(` $slots `:` type($slots) `)` `into` $dkv `[` $group
    `]` attr-dict `:` type($partial) `,` type($dkv)
  }];
  let hasVerifier = 1;
}

def SMLAGPU_StoreRowsOp : SMLAGPU_Op<"store_rows"> {
  let summary = "Write a fragment into a token's rows of an output";
  let description = [{
    `dest[token, row0 + m, col + n] = fragment[m, n]` in dest's element
    type, for the m64nN fragment of a warpgroup: a CTA's dQ columns.

    ```mlir
    smla_gpu.store_rows %dq into %out[%t, %h0] {col = 0}
        : vector<128xf32>, memref<?x64x576xbf16>
    ```
  }];
  let arguments = (ins SMLAGPU_Fragment:$fragment,
      MemRefRankOf<[BF16, F32], [3]>:$dest, Index:$token, Index:$row0,
      I64Attr:$col);
  let assemblyFormat = [{
    $fragment `into` $dest `[` $token `,` $row0 `]` attr-dict `:`
    type($fragment) `,` type($dest)
  }];
  let hasVerifier = 1;
}

def SMLAGPU_CountNonFiniteRowsOp : SMLAGPU_Op<"count_nonfinite_rows"> {
  let summary = "Count the CTA's output rows that hold a NaN or an Inf";
  let description = [{
    After the roles, on every thread of the CTA: each thread flagged the
    NaN or Inf values its `smla_gpu.store_rows` wrote; one barrier with an
    OR reduction tells the CTA whether any did, and only then is
    `dest[token, row0 .. row0 + 64, :]` read back and `counters[3]`
    (nonfinite_rows) raised by one per row holding a NaN or an Inf, each
    row once whichever roles wrote its columns.

    ```mlir
    smla_gpu.count_nonfinite_rows %dq[%t, %h0] into %counters
        : memref<?x64x576xbf16>, memref<4xi64>
    ```
  }];
  let arguments = (ins MemRefRankOf<[BF16, F32], [3]>:$dest, Index:$token,
      Index:$row0, MemRefRankOf<[I64], [1]>:$counters);
  let assemblyFormat = [{
    $dest `[` $token `,` $row0 `]` `into` $counters attr-dict `:`
    type($dest) `,` type($counters)
  }];
}

#endif // SMLA_DIALECT_SMLAGPU_IR_SMLAGPUOPS_TD
