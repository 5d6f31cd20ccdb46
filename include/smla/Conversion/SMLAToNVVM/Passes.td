//===- Passes.td - the tile IR mapped onto GPU kernels and lowered to NVVM -===//
//
// Part of the smla project: a compiled sparse-MLA backward.
// Included by smla/Conversion/Passes.td (one pass declaration file and
// one generated reference page for every conversion pass).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATONVVM_PASSES_TD
#define SMLA_CONVERSION_SMLATONVVM_PASSES_TD

include "mlir/Pass/PassBase.td"

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

#endif // SMLA_CONVERSION_SMLATONVVM_PASSES_TD
