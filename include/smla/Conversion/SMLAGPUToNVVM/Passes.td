//===- Passes.td - smla-gpu-to-nvvm: the smla_gpu ops lowered to NVVM -===//
//
// Part of the smla project: a compiled sparse-MLA backward.
// Included by smla/Conversion/Passes.td (one pass declaration file and
// one generated reference page for every conversion pass).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_CONVERSION_SMLAGPUTONVVM_PASSES_TD
#define SMLA_CONVERSION_SMLAGPUTONVVM_PASSES_TD

include "mlir/Pass/PassBase.td"

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

#endif // SMLA_CONVERSION_SMLAGPUTONVVM_PASSES_TD
