//===- Passes.td - smla-schedule-warp-specialized: the block loop as warpgroup roles -===//
//
// Part of the smla project: a compiled sparse-MLA backward.
// Included by smla/Conversion/Passes.td (one pass declaration file and
// one generated reference page for every conversion pass).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLATOSMLAGPU_PASSES_TD
#define SMLA_CONVERSION_SMLATOSMLAGPU_PASSES_TD

include "mlir/Pass/PassBase.td"

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

#endif // SMLA_CONVERSION_SMLATOSMLAGPU_PASSES_TD
