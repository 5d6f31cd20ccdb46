//===- Passes.td - smla conversion passes ------------------*- tablegen -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_PASSES_TD
#define SMLA_CONVERSION_PASSES_TD

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

def SMLAGpuMap : Pass<"smla-gpu-map", "::mlir::ModuleOp"> {
  let summary = "Map the guarded tile loop nest onto CUDA kernels";
  let description = [{
    Moves each function that holds a decomposed, guarded smla loop nest into
    a `gpu.module @smla_kernels` and erases the host function. One CTA runs
    one (token, group) step: the `t` loop becomes `gpu.block_id x`, the `g`
    loop `gpu.block_id y`, and the top-k block loop stays a loop inside the
    CTA. Kernel parameters are bare pointers (flat static memrefs, lowered
    with `use-bare-ptr-memref-call-conv`) plus the run-time sizes T, S_kv and
    K as i32 and, for the bwd kernel, the softmax scale `sm_scale` as f32
    (last parameter). The op's `sm_scale` attribute, copied onto
    smla.softmax / smla.dscores as `scale`, is only a compile-time
    placeholder: smla-lower-to-nvvm reads the `sm_scale` argument instead.
    The body re-creates the dynamically shaped views with
    `memref.reinterpret_cast`, so the tile ops are cloned unchanged. Scratch
    `memref.alloca`s become workgroup-space allocas that
    `smla-allocate-smem` turns into slices of dynamic shared memory.

    The zero fill of the fp32 dKV accumulator and `smla.cast_dkv` become
    kernels of their own (one CTA per kv row); the cast kernel takes the
    `counters` when the op counts non-finite rows (then also for an f32
    result, which it only reads).

    Before:
    ```mlir
    func.func @f(%q: memref<?x16x576xbf16>, ...) {
      %keys = memref.alloca() : memref<64x576xbf16>
      linalg.fill ins(%zero : f32) outs(%dkv_accum : memref<?x1x576xf32>)
      scf.for %t = %c0 to %T step %c1 {
        scf.for %g = %c0 to %c1 step %c1 { ...tile ops... }
      }
      smla.cast_dkv %dkv_accum into %dkv : ...
    }
    ```
    After:
    ```mlir
    gpu.module @smla_kernels {
      gpu.func @f_bwd(%q: memref<2147483647xbf16>, ..., %T: i32,
                      %S_kv: i32, %K: i32, %sm_scale: f32) kernel {
        %t = gpu.block_id x
        %g = gpu.block_id y
        %qv = memref.reinterpret_cast %q to offset: [0],
            sizes: [%Tx, 16, 576], strides: [9216, 576, 1] : ...
        %keys = memref.alloca() : memref<64x584xbf16, #gpu.address_space<workgroup>>
        ...tile ops...
      }
      gpu.func @f_dkv_zero(...) kernel { ... }
      gpu.func @f_dkv_cast(...) kernel { ... }
    }
    ```

    Key tiles (gather destinations) get rows padded by 16 bytes (8 bf16)
    so that the 8 rows one mma fragment or ldmatrix phase reads fall in
    different shared-memory banks. With one group (G = 1), and when it fits
    in shared memory next to the tiles (within the share of an SM that
    `ctas-per-sm` CTAs leave each), the CTA's q rows, then its do rows, are
    copied once (cp.async) into padded shared buffers before the block
    loop, and `smla.tile_dot` (and `smla.scatter_dkv`, when both are staged)
    read those `[1, H, W]` views at token 0 instead of global memory.

    With `mma`, the dQ accumulator that the register form of
    `smla-lower-to-nvvm` can hold (zero-filled, only accumulated into by
    `smla.dq_accumulate` and stored, the warps dividing evenly among its m
    tiles, its column pairs within the registers per thread that `threads`
    and `ctas-per-sm` leave above the rest of the kernel) is marked
    `smla.dq_registers = <column pairs per warp>` on its alloca: it is left
    out of the staging estimate, gets no shared memory from
    `smla-allocate-smem`, and the lowering keeps it in a private array per
    thread.
  }];
  let options = [
    Option<"threads", "threads", "int64_t", /*default=*/"256",
           "Threads per CTA (a multiple of 32)">,
    Option<"ctasPerSm", "ctas-per-sm", "int64_t", /*default=*/"1",
           "Shared memory left for this many CTAs per SM bounds the optional "
           "staging of q and do rows (the tiles themselves are not shrunk)">,
    Option<"mma", "mma", "bool", /*default=*/"true",
           "Plan for the mma lowering (the dQ accumulator in registers); a "
           "`smla.mma` attribute on the builtin module overrides it">,
    Option<"wgmmaScatter", "wgmma-scatter", "bool", /*default=*/"false",
           "Stage q and do of a 32-row CTA at block 64 on 512 threads as one "
           "canonical [q; do] tile, for the wgmma form of the dKV scatter "
           "(smla-defer-scatter)">,
    Option<"stageTokenRows", "stage-token-rows", "bool", /*default=*/"true",
           "Stage the CTA's q and do rows in shared memory where they fit "
           "(off for the warp-specialized schedule, whose producer stages "
           "them itself)">,
    Option<"clusterHeadBlocks", "cluster-head-blocks", "bool",
           /*default=*/"false",
           "With wgmma-scatter and an even number of head blocks per token: "
           "also stage the partner head block's (g ^ 1) q and do rows for "
           "this CTA's half of the columns, so that smla-defer-scatter runs "
           "each pair as a cluster that splits the dKV columns">,
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::scf::SCFDialect"];
}

def SMLAPrefetchKeys : Pass<"smla-prefetch-keys", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Gather the next block's key rows while this block's dKV "
                "is reduced";
  let description = [{
    In each kernel's top-k block loop, splits the key gather in two: the
    copies (cp.async) for step j + 1 are issued right after the last op of
    step j that reads the key tile (the dQ accumulate), so they land while
    step j's dKV scatter runs, and step j + 1 begins by waiting for them.
    Step 0 issues its own copies first thing (under `scf.if` on the first
    step), and the last step issues none, so no copy is in flight after
    the loop. An issue is a clone of the ops the gather's indices and mask
    are computed from (the rotated block index, the index load, the tail
    lane count, the mask) at the issued step, without guard counters (the
    block's own mask still counts): the masks and the never-dereferenced
    invalid lanes are those of the unsplit gather.

    The key tile stays single-buffered: the dQ accumulate of step j must
    finish before step j + 1's copies are issued, so smla-insert-barriers
    places a barrier there (the issue writes the tile); the copies become
    visible at the wait, which writes the tile too. A loop where an op
    touches the tile before the step's gather, or whose indices or mask
    come from ops that cannot be re-run, keeps the whole gather. Nothing
    checks later that the tile stays untouched between an issue and its
    wait: smla-insert-barriers trusts it.

    Kernels marked for several CTAs per SM (`smla.ctas_per_sm` > 1) are
    left alone: there the other CTAs run while one waits for its keys, so
    the latency is hidden already, and the registers are tighter.

    Before (one step):
    ```mlir
    %m = smla.index_mask %idx ...
    smla.gather %kv[%g] rows(%idx) mask(%m : vector<64xi1>) into %keys
    smla.tile_dot ... ; smla.softmax ... ; smla.dq_accumulate %ds, %keys ...
    smla.scatter_dkv ...
    ```
    After:
    ```mlir
    scf.if %first_step {
      smla.gather %kv[%g] rows(%idx) mask(%m : vector<64xi1>) into %keys
          {issue_only}
    }
    smla.gather ... into %keys {wait_only}
    smla.tile_dot ... ; smla.softmax ... ; smla.dq_accumulate %ds, %keys ...
    scf.if %has_next {
      %idx1 = smla.index_load ... ; %m1 = smla.index_mask %idx1 ...
      smla.gather %kv[%g] rows(%idx1) mask(%m1 : vector<64xi1>) into %keys
          {issue_only}
    }
    smla.scatter_dkv ...
    ```
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect"];
}

def SMLADeferScatter : Pass<"smla-defer-scatter", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Run each block's dKV scatter on wgmma, in chunks spread "
                "over the next block";
  let description = [{
    For a kernel whose q and do rows are staged as one canonical [q; do]
    tile (smla-gpu-map `wgmma-scatter`: a 32-row CTA at block 64 on 512
    threads), splits
    the block loop's `smla.scatter_dkv` in two. At its place, a
    `smla.pack_dkv` writes the block's dS and P as bf16 (wgmma's A
    operand) and its slots (the index where the mask holds, else -1) into
    two buffers of their own. The products and reductions follow as
    `smla.scatter_packed` ops, one per column chunk of 192 (four
    warpgroups of 48 columns), in the next step: chunk 0 before the key
    gather (its wait, with smla-prefetch-keys), chunk 1 before the block
    products, chunk 2 before the dQ accumulate; after the loop, all chunks
    of the last block. Before the loop the slots are filled with -1, so
    the first step's chunks add nothing.

    Why: on wgmma a block's dKV products are short (about 0.8 us for a
    32-row CTA at block 64), but its ~147 KB of fp32 reductions need ~5 us
    at one SM's share of the L2 rate. Issued right after the products,
    they would stall the warps; issued in three parts between the next
    block's phases, each part drains while the other phases run.
    The buffers are single: chunk 2 of step j - 1 precedes the pack of
    step j, and smla-insert-barriers places the barriers between them.

    A kernel of an even number n of head blocks per token (grid y = n g
    + hb; B1's H = 64: two, H = 128: four) whose gpu-map staged the
    partner head block's (hb ^ 1) q and do rows for this CTA's half of
    the columns (`smla.partner_rows`: smla-gpu-map's
    `cluster-head-blocks`, the configuration key cluster=1) runs head
    blocks hb and hb ^ 1 as a
    cluster of two CTAs (`nvvm.cluster_dim` 1 x 2 x 1) that split the dKV
    columns: pack_dkv also sends its packed dS^T and P^T to the partner
    (st.async, completing the partner's mbarrier; two block buffers), and
    each chunk reduces 96 columns of this CTA's half for the rows of both
    (`cluster` operands); the block walk's rotation takes the pair's even
    head block, so that both walk the same slots in one order. Each slot
    is then reduced once per pair of head blocks, not
    once per head block: half the reduction bytes, for 8 KB of packed
    bf16 tiles a block through distributed shared memory (moving the fp32
    sums between the CTAs instead would cost as much as it saves).

    Then, when the step's only `smla.dq_accumulate` reads the packed dS
    and the key tile of the step's only gather into an accumulator in
    registers, and the block products (a wgmma pair) are the tile's only
    other readers, the dQ update becomes a `smla.dq_packed` right after the
    pack (dQ^T = K^T dS^T on wgmma, from the packed dS^T), and the key tile
    an unpadded, 1 KB aligned buffer seen through a view marked
    `smla.swizzled_keys`: wgmma's 128-byte swizzle, which the gather, the
    products (keys by descriptor, K-major) and `dq_packed` (MN-major)
    lower by. In the swizzle each 128-byte kv line the gather copies lands
    in one 128-byte line of the tile; the unswizzled canonical layout
    would spread it over 8.

    Last, with `fuse-epilogue` (configuration key `epilogue=fused`), when
    the block products are
    the wgmma pair whose S and dP tiles only the softmax, dscores and the
    pack read (and write in place), the pass moves the chunks that sat
    between the products and the pack (chunk 2) before the products, and
    the pack right after dscores, with the index masks it reads; it marks
    the five ops `smla.fused_epilogue`. The lowering then runs softmax, dS
    and the pack in warpgroup 0's wgmma accumulators, right after the
    products: no f32 S / dP tile stores or loads, no CTA-wide softmax
    pass, two barriers fewer a step. It marks the S and dP tiles' allocas
    too: nothing touches them any more, so smla-allocate-smem gives them
    no bytes and the lowering erases them.

    With `overlap-chunks=1` as well (configuration key
    `epilogue=overlap`), chunk 2 goes right before the products and is
    marked `smla.overlap_run` (the kernel too): warpgroups 1-3 run it
    while warpgroup 0 runs the fused ops, a named barrier ordering the
    chunk's reads of the packed tiles and slots before the pack's writes,
    and smla-insert-barriers sees chunk and run as one op. With
    `overlap-chunks=2` (`overlap_chunks=2`) chunk 1 goes right before
    chunk 2, marked too: both run alongside, the last one arriving at the
    named barrier, and the key gather then closes the step's first phase.

    Before (one step):
    ```mlir
    smla.gather ... {wait_only}
    smla.tile_dot ... ; smla.softmax ... ; smla.dscores ...
    smla.dq_accumulate ...
    smla.scatter_dkv %ds, %p, %q, %do[%t, %hb] rows(%idx) mask(%m ...)
        into %dkv[%g]
    ```
    After (without fuse-epilogue; with it, chunk 2 sits after chunk 1
    and the pack right after dscores, all five marked):
    ```mlir
    linalg.fill ins(%c-1_i32 : i32) outs(%slots : memref<64xi32, 3>)
    scf.for ... {
      smla.scatter_packed %packed, %slots, %q, %do[%t, %hb] into %dkv[%g]
          {chunk = 0, chunks = 3}
      smla.gather ... {wait_only}
      smla.scatter_packed ... {chunk = 1, chunks = 3}
      smla.tile_dot ...
      smla.softmax ... ; smla.dscores ...
      smla.scatter_packed ... {chunk = 2, chunks = 3}
      smla.pack_dkv %ds, %p rows(%idx) mask(%m ...) into %packed, %slots
      smla.dq_packed %packed, %keys into %acc
    }
    smla.scatter_packed ... {chunk = 0, chunks = 3}   (and 1, 2)
    ```
  }];
  let options = [
    Option<"fuseEpilogue", "fuse-epilogue", "bool", /*default=*/"false",
           "Fuse softmax, dscores and pack_dkv into the wgmma block "
           "products' warpgroup (smla.fused_epilogue)">,
    Option<"overlapChunks", "overlap-chunks", "int64_t", /*default=*/"0",
           "With fuse-epilogue: the step's last N dKV chunks (0, 1 or 2) "
           "run in warpgroups 1-3 while warpgroup 0 runs the fused "
           "epilogue (smla.overlap_run)">,
  ];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::arith::ArithDialect"];
}

def SMLAAllocateSmem : Pass<"smla-allocate-smem", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Give every workgroup buffer a byte range of dynamic shared "
                "memory";
  let description = [{
    Replaces each workgroup-space `memref.alloca` of a `gpu.func` by a
    `memref.view` of one `.extern .shared` buffer (`memref.global @smla_smem`
    of `memref<0xi8, workgroup>`) at a constant byte offset. Buffers whose
    live ranges overlap get disjoint byte ranges (first fit, 128-byte
    aligned, or the alloca's `alignment` where larger); a live range is the span of the buffer's uses (through every
    view and address computed from it), widened to the whole of the
    outermost loop around a use that does not also enclose the buffer's
    definition: a buffer used in a loop is live across its back edge. The total goes to the
    kernel's `smla.dynamic_smem` attribute.

    A dQ accumulator whose alloca `smla-gpu-map` marked
    `smla.dq_registers` lives in registers and gets no bytes, and so does
    an S or dP tile that `smla-defer-scatter` marked `smla.fused_epilogue`
    (its ops run in the products' registers).

    Before:
    ```mlir
    %a = memref.alloca() : memref<16x64xf32, #gpu.address_space<workgroup>>
    ```
    After:
    ```mlir
    %base = memref.get_global @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
    %raw = memref.reinterpret_cast %base to offset: [0], sizes: [4096], strides: [1] : ...
    %a = memref.view %raw[%c0][] : memref<4096xi8, #gpu.address_space<workgroup>>
        to memref<16x64xf32, #gpu.address_space<workgroup>>
    ```
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect"];
}

def SMLAVerifySmem : Pass<"smla-verify-smem", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Prove that no two live shared-memory slices share storage";
  let description = [{
    For every `gpu.func`, collects the `memref.view`s of the dynamic
    shared-memory buffer (constant byte offset, static size) and computes
    each one's live range with the same conservative rule as
    `smla-allocate-smem`, following the view through every op that takes
    it. Fails, naming both slices, if two slices whose live ranges overlap
    have overlapping byte ranges, if a slice has a non-constant offset, or
    if a slice reaches past the kernel's `smla.dynamic_smem`. This is the
    invariant whose violation (a Q tile overwritten by a dKV staging tile)
    produced NaN gradients in the kernel this project replaces.

    Rejected (both views live in the loop, both at byte 0):
    ```mlir
    %q = memref.view %raw[%c0][] : memref<4096xi8, 3> to memref<16x64xf32, 3>
    // error: shares shared-memory bytes [0, 2048) with a slice that is
    //        live at the same time
    %s = memref.view %raw[%c0][] : memref<4096xi8, 3> to memref<8x64xf32, 3>
    scf.for %i = %c0 to %n step %c1 {
      memref.store %f, %s[%c0, %c0] : memref<8x64xf32, 3>
      %v = memref.load %q[%c0, %c0] : memref<16x64xf32, 3>
    }
    ```
  }];
}

def SMLAInsertBarriers
    : Pass<"smla-insert-barriers", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Place CTA barriers between tile ops that share shared memory";
  let description = [{
    The tile ops of a kernel are CTA-cooperative: what one op writes to a
    shared-memory tile, other threads read in a later op. This pass walks
    every `gpu.func` in program order and inserts a `gpu.barrier` before a
    tile op that reads bytes an op since the last barrier wrote, or writes
    bytes such an op read or wrote. Footprints are byte ranges of the
    dynamic shared-memory buffer (after `smla-allocate-smem`), so tiles that
    share storage conflict. A dependence between `smla.softmax` and
    `smla.dscores` through a tile of their own shape needs none: their
    lowerings visit element (h, j) in the same thread. Loops and branches
    are handled conservatively: nothing is pending on entry or after them,
    and a body that ends with pending accesses ends with a barrier.
    `smla-lower-to-nvvm` runs it first if it has not run; the lowerings emit
    no barriers of their own between tile ops.

    In one top-k block of the decomposed backward this leaves four barriers:
    after the gather, after both block products (scores and dP), after
    softmax and dS, and at the end of the block.

    Before (one step of the block loop):
    ```mlir
    smla.gather %kv[%g] rows(%idx) mask(%m : vector<64xi1>) into %keys
    smla.tile_dot %q[%t, %g], %keys into %s ...
    smla.tile_dot %do[%t, %g], %keys into %dp ...
    smla.softmax %s, %lse[%t, %g] ... into %s
    smla.dscores %s, %dp, %delta ... into %dp
    smla.dq_accumulate %dp, %keys into %acc ...
    smla.scatter_dkv %dp, %s, %q, %do[%t, %g] rows(%idx) ... into %dkv[%g]
    ```
    After:
    ```mlir
    smla.gather ...
    gpu.barrier
    smla.tile_dot ...
    smla.tile_dot ...
    gpu.barrier
    smla.softmax ...
    smla.dscores ...
    gpu.barrier
    smla.dq_accumulate ...
    smla.scatter_dkv ...
    gpu.barrier
    ```
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect"];
}

def SMLALowerToNVVM : Pass<"smla-lower-to-nvvm", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Lower smla tile ops inside gpu.funcs to CTA-cooperative "
                "gpu/nvgpu/nvvm code";
  let description = [{
    Each tile op becomes code that all threads of the CTA run together;
    barriers between them come from `smla-insert-barriers` (run first if it
    has not run):

    * `smla.gather`: per 16-byte chunk, `nvgpu.device_async_copy` whose
      source row is `select(mask, idx, 0)` and whose source element count is
      `select(mask, 8, 0)`: an invalid slot reads nothing and zero-fills;
      no out-of-bounds address is ever formed;
    * `smla.tile_dot`, `smla.dq_accumulate`: bf16 products accumulated in
      f32 (tensor-core `nvvm.mma.sync` m16n8k16 when `mma` is set, heads as
      M, rows >= Hg zero-filled and never stored; dq_accumulate rounds dS
      to bf16). A `smla.mma = false` attribute on the enclosing builtin
      module (smla-compile --mma=false) overrides the option;
    * `smla.softmax`: `math.exp2(arith.minimumf(x2, clamp))` consumed only
      by `arith.select(mask && live, e, 0)`, with
      `x2 = s * (sm_scale * log2e) - lse2` and `sm_scale` the kernel's f32
      argument when it has one (else the op's constant `scale`);
      `smla.dscores` likewise multiplies by that argument;
    * `smla.scatter_dkv`: per lane, a `red.global.add.v4.f32` predicated by
      the mask, at `select(mask, idx, 0)`;
    * `smla.index_load` / `smla.index_mask` / `smla.row_live`: per-lane
      scalar code, re-evaluated where a lane is used; guard counters are
      atomics, skipped when the counter pointer is null.

    Before (a masked gather of 64 key rows of 576 bf16):
    ```mlir
    smla.gather %kv[%g] rows(%idx) mask(%m : vector<64xi1>) into %keys
        : memref<?x1x576xbf16>, vector<64xi32> -> memref<64x584xbf16, 3>
    ```
    After (per 16-byte chunk c of row j, on the CTA's threads):
    ```mlir
    %ok = ...lane j of %m: 0 <= idx < S_kv, j < K - k0, idx <= position...
    %row = arith.select %ok, %idx_j, %c0 : index
    %n = arith.select %ok, %c8, %c0 : index
    %tok = nvgpu.device_async_copy %kv[%row, %g, %c], %keys[%j, %c], 8,
        %n {bypassL1} : memref<?x1x576xbf16> to memref<64x584xbf16, 3>
    ```
  }];
  let options = [
    Option<"mma", "mma", "bool", /*default=*/"true",
           "Use mma.sync for tile_dot and dq_accumulate">,
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
}

//===----------------------------------------------------------------------===//
// The warp-specialized schedule (docs/schedule.md).
//===----------------------------------------------------------------------===//

def SMLAScheduleWarpSpecialized
    : Pass<"smla-schedule-warp-specialized", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Restate a bwd kernel's block loop as warpgroup roles";
  let description = [{
    For each bwd gpu.func of `smla-gpu-map` (one token and 64 heads per
    CTA, blocks of 64 keys, 384 threads), replaces the guarded tile ops of
    the step (delta, row_live, the top-k block loop, store_dq) with an
    `smla_gpu.warp_specialize` of three roles and three pipelines:

    * `producer` (40 registers): the CTA's q and do rows into swizzled
      tiles (`load_rows`, pipeline `rows`), then per block the cloned
      index loads and masks, `write_slots` and the masked `gather_keys`
      into the key stage (pipeline `keys`);
    * `softmax` (232 registers): Delta and the dead-row count (the cloned
      `smla.delta` and `smla.row_live`), then per block S and dP by
      `wgmma`, the guarded softmax and dS in `arith` / `math` on the
      fragments (`math.exp2` of `arith.minimumf(x2, clamp)`, selected by
      the slot mask and the row's liveness), P^T and dS^T to shared
      memory (pipeline `pds`), dQ[:, 0:256] += dS K with dS as register A;
    * `dkv` (232 registers): dQ[:, 256:W] += dS K (A from the dS^T tile),
      the key stage released, then dS^T q (+ P^T do) in 64-column chunks,
      each `reduce_dkv` into the fp32 dKV buffer at the stage's slots.

    The dKV chunks are split between the two consumer roles: the softmax
    role reduces the last `softmax-chunks` of them after it has released
    the key stage (while the next block's keys are gathered), the dkv
    role the others, `dkv-depth` 2 issuing each next chunk's products
    before the current chunk's reductions.

    A kernel the schedule cannot take is an error naming the reason.

    Before (the block loop of a bwd kernel):
    ```mlir
    scf.for %j = %c0 to %n step %c1 {
      %idx = smla.index_load %indices[%t, %g, %off] ...
      %m = smla.index_mask %idx bound(%S) lanes(%l) ... -> vector<64xi1>
      smla.gather %kv[%g] rows(%idx) mask(%m : vector<64xi1>) into %keys ...
      smla.tile_dot %q[%t, %g], %keys into %s ...
      smla.tile_dot %do[%t, %g], %keys into %dp ...
      smla.softmax %s, %lse[%t, %g] mask(%m ...) live(%live ...) into %p ...
      smla.dscores %p, %dp, %delta into %ds ...
      smla.dq_accumulate %ds, %keys into %dqacc ...
      smla.scatter_dkv %ds, %p, %q, %do[%t, %g] rows(%idx) mask(%m2 ...) into %dkv[%g] ...
    }
    ```
    After:
    ```mlir
    %keys = smla_gpu.pipeline_create %bars {async_copies} : ... ->
        !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"]
        registers [40, 232, 232] {
      scf.for %j = %c0 to %n step %c1 {
        %idx = smla.index_load ...
        %m = smla.index_mask ...
        smla_gpu.producer_acquire %keys[%j] : ...
        smla_gpu.write_slots %idx masks(%m, %m2 : ...) into %slots ...
        smla_gpu.gather_keys %kv[%idx] group(%g) mask(%m : vector<64xi1>) into %ktile ...
        smla_gpu.producer_commit %keys[%j] : ...
      }
    }, {
      %dq = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %zero) -> (vector<128xf32>) {
        smla_gpu.consumer_wait %keys[%j] : ...
        %s = smla_gpu.wgmma a_tile(%qtile : ...) b_tile(%ktile : ...) {...} -> vector<32xf32>
        ...
        %e = math.exp2 %xc : vector<32xf32>
        %p = arith.select %ok, %e, %zero32 : vector<32xi1>, vector<32xf32>
        ...
      }
    }, {
      ...
    }
    ```
  }];
  let options = [
    Option<"softmaxChunks", "softmax-chunks", "int64_t", /*default=*/"3",
           "64-column dKV chunks the softmax role reduces (the last ones)">,
    Option<"dkvDepth", "dkv-depth", "int64_t", /*default=*/"1",
           "Chunks in flight in the dkv role (1 or 2)">,
  ];
  let dependentDialects = ["::mlir::smla_gpu::SMLAGPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
}

def SMLAGPUToNVVM : Pass<"smla-gpu-to-nvvm", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Lower the smla_gpu schedule to NVVM, one pattern per op";
  let description = [{
    Runs after `smla-allocate-smem` (the tiles, slots and mbarrier words
    are views of the kernel's dynamic shared memory). Each smla_gpu op
    becomes NVVM / LLVM code:

    * `warp_specialize`: `scf.if` on the warpgroup index (tid.x / 128,
      read from lane 0 so that every warp takes one branch), each branch a
      `nvvm.setmaxregister` to the role's registers, the role's body, and
      back to the starting registers (the code after the roles runs on
      every warp);
      `thread_in_warpgroup`: tid.x % 128;
    * `pipeline_create`: thread 0 initialises the mbarriers, then a CTA
      barrier; `producer_acquire` / `consumer_wait`:
      `nvvm.mbarrier.try_wait.parity`; `producer_commit`:
      `nvvm.cp.async.mbarrier.arrive` (noinc) and `nvvm.mbarrier.arrive`;
      `consumer_release`: `nvvm.mbarrier.arrive`;
    * `gather_keys` / `load_rows`: `nvgpu.device_async_copy` of 16 bytes
      into the 128-byte swizzle, the gather's source row and size selected
      by the mask (size 0 zero-fills); `write_slots`: thread j < 64 writes
      slot j. The cloned `smla.index_load` / `smla.index_mask` /
      `smla.row_live` / `smla.delta` of a role are lowered with that
      role's 128 threads (the lane functions of smla-lower-to-nvvm);
    * `wgmma`: `wgmma.fence`, the chain of `wgmma.mma_async` (a PTX
      builder: MLIR 22's op has no register-A form) with shared-memory
      descriptors in the 128-byte swizzle, `wgmma.commit_group`;
      `wgmma_wait`: `nvvm.wgmma.wait.group.sync.aligned` and an empty
      asm that ties every fragment register to it, so nothing reads an
      accumulator before the wait;
    * `fragment_rows` / `fragment_columns` / `pack_operand` /
      `store_fragment` / `store_rows`: the m64nN fragment layout made
      explicit; `count`: per-thread sums and one atomic add where any
      predicate holds; `reduce_dkv`: lanes 2k and 2k + 1 swap a column
      pair so that each `red.global.add.v4.f32` adds four consecutive
      columns of one slot, predicated on the slot (`select(slot >= 0,
      slot, 0)` is the only address).

    Before:
    ```mlir
    smla_gpu.consumer_wait %keys[%j] : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    ```
    After:
    ```mlir
    %bar = llvm.inttoptr %addr : i64 to !llvm.ptr<3>
    nvvm.mbarrier.try_wait.parity %bar, %phase, %ticks : !llvm.ptr<3>, i32, i32
    nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::gpu::GPUDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect",
                           "::mlir::vector::VectorDialect"];
}

#endif // SMLA_CONVERSION_PASSES_TD
