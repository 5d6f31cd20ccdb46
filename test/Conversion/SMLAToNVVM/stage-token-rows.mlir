// RUN: smla-opt --smla-guarded --smla-gpu-map %s | FileCheck %s --check-prefix=MAP
// RUN: smla-opt --smla-gpu-kernels %s | FileCheck %s --check-prefix=LOWER

// With one group, smla-gpu-map copies the CTA's q and do rows into shared
// memory once (rows padded by 16 bytes) and the block products read them
// there: tile_dot and scatter_dkv get the staged [1, H, W] views, read at
// token 0. The copy (cp.async) is waited for and followed by a barrier
// before any block op.

// MAP-LABEL: gpu.func @one_group_bwd
// MAP: %[[T:block_id_x]] = gpu.block_id x
// MAP: gpu.thread_id x
// MAP-NEXT: %[[ZERO:.*]] = arith.constant 0 : index
// MAP-NEXT: %[[QS:.*]] = memref.alloca() : memref<4x104xbf16, #gpu.address_space<workgroup>>
// MAP: %[[QV:.*]] = memref.reinterpret_cast %[[QS]] to offset: [0], sizes: [1, 4, 96], strides: [416, 104, 1]
// MAP: scf.for
// MAP: nvgpu.device_async_copy %{{.*}}[%[[T]], %{{.*}}, %{{.*}}], %[[QV]][%{{.*}}, %{{.*}}, %{{.*}}], 8 {bypassL1} : memref<?x4x96xbf16> to memref<1x4x96xbf16, strided<[416, 104, 1]>, #gpu.address_space<workgroup>>
// MAP: %[[DS:.*]] = memref.alloca() : memref<4x72xbf16, #gpu.address_space<workgroup>>
// MAP: %[[DV:.*]] = memref.reinterpret_cast %[[DS]] to offset: [0], sizes: [1, 4, 64], strides: [288, 72, 1]
// MAP: nvgpu.device_async_wait
// MAP-NEXT: gpu.barrier
// MAP: smla.tile_dot %[[QV]][%[[ZERO]], %{{.*}}]
// MAP: smla.tile_dot %[[DV]][%[[ZERO]], %{{.*}}]
// MAP: smla.scatter_dkv %{{.*}}, %{{.*}}, %[[QV]], %[[DV]][%[[ZERO]], %{{.*}}]

// After lowering, the q/do pairs of the block products are 32-bit shared loads.
// LOWER-LABEL: gpu.func @one_group_bwd
// LOWER: nvvm.mma.sync
// LOWER-NOT: !llvm.ptr<1> -> i32
// LOWER: llvm.load %{{[0-9]+}} {alignment = 4 : i64} : !llvm.ptr<3> -> i32
// LOWER: nvvm.mma.sync
func.func @one_group(%q: memref<?x4x96xbf16>, %kv: memref<?x1x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x1x96xf32>, %dkv: memref<?x1x96xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x1x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x1x96xf32>) dkv(%dkv : memref<?x1x96xbf16>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 1, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}
