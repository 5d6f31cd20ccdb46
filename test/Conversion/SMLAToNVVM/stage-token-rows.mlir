// RUN: smla-opt --smla-guarded --smla-gpu-map %s | FileCheck %s --check-prefix=MAP
// RUN: smla-opt --smla-gpu-kernels %s | FileCheck %s --check-prefix=LOWER
// RUN: smla-opt --smla-guarded --smla-gpu-map=ctas-per-sm=32 %s | FileCheck %s --check-prefix=TIGHT

// smla-gpu-map copies the q and do rows of the CTA's (token, head block)
// into shared memory once (rows padded by 16 bytes) and the block products
// read them there: tile_dot and scatter_dkv get the staged [1, Hb, W]
// views, read at token 0 and head block 0. Head block g owns rows
// [g * Hb, (g + 1) * Hb) of the token. The copy (cp.async) is waited for
// and followed by a barrier before any block op.

// MAP-LABEL: gpu.func @one_group_bwd
// MAP-SAME: smla.staged = ["q", "do"]
// MAP: %[[T:block_id_x]] = gpu.block_id x
// MAP-NEXT: %[[G:block_id_y]] = gpu.block_id y
// MAP: gpu.thread_id x
// MAP-NEXT: %[[ZERO:.*]] = arith.constant 0 : index
// MAP-NEXT: %[[HB:.*]] = arith.constant 4 : index
// MAP-NEXT: %[[FIRST:.*]] = arith.muli %[[G]], %[[HB]] : index
// MAP-NEXT: %[[QS:.*]] = memref.alloca() : memref<4x104xbf16, #gpu.address_space<workgroup>>
// MAP: %[[QV:.*]] = memref.reinterpret_cast %[[QS]] to offset: [0], sizes: [1, 4, 96], strides: [416, 104, 1]
// MAP: scf.for
// MAP: %[[ROW:.*]] = arith.addi %[[FIRST]], %{{.*}} : index
// MAP-NEXT: nvgpu.device_async_copy %{{.*}}[%[[T]], %[[ROW]], %{{.*}}], %[[QV]][%[[ZERO]], %{{.*}}, %{{.*}}], 8 {bypassL1} : memref<?x4x96xbf16> to memref<1x4x96xbf16, strided<[416, 104, 1]>, #gpu.address_space<workgroup>>
// MAP: %[[DS:.*]] = memref.alloca() : memref<4x72xbf16, #gpu.address_space<workgroup>>
// MAP: %[[DV:.*]] = memref.reinterpret_cast %[[DS]] to offset: [0], sizes: [1, 4, 64], strides: [288, 72, 1]
// MAP: nvgpu.device_async_wait
// MAP-NEXT: gpu.barrier
// MAP: smla.tile_dot %[[QV]][%[[ZERO]], %[[ZERO]]]
// MAP: smla.tile_dot %[[DV]][%[[ZERO]], %[[ZERO]]]
// MAP: smla.scatter_dkv %{{.*}}, %{{.*}}, %[[QV]], %[[DV]][%[[ZERO]], %[[ZERO]]]

// After lowering, the q/do pairs of the block products are 32-bit shared loads.
// LOWER-LABEL: gpu.func @one_group_bwd
// LOWER: nvvm.mma.sync
// LOWER-NOT: !llvm.ptr<1> -> i32
// LOWER: llvm.load %{{[0-9]+}} {alignment = 4 : i64} : !llvm.ptr<3> -> i32
// LOWER: nvvm.mma.sync

// With room for 32 CTAs per SM (6272 bytes each) only the do rows fit next
// to the tiles: the q.k product reads q in global memory at (token, head
// block), the do.v product the staged rows, and scatter_dkv, which reads
// them staged only when both are, global memory.
// TIGHT-LABEL: gpu.func @one_group_bwd
// TIGHT-SAME: smla.staged = ["do"]
// TIGHT-NOT: nvgpu.device_async_copy {{.*}} memref<?x4x96xbf16>
// TIGHT: smla.tile_dot %{{.*}}[%block_id_x, %block_id_y], %{{.*}} : memref<?x4x96xbf16>
// TIGHT: smla.tile_dot %{{.*}}[%c0{{.*}}, %c0{{.*}}], %{{.*}} : memref<1x4x64xbf16, strided<[288, 72, 1]>
// TIGHT: smla.scatter_dkv %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}[%block_id_x, %block_id_y] rows

func.func @one_group(%q: memref<?x4x96xbf16>, %kv: memref<?x1x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x1x96xf32>, %dkv: memref<?x1x96xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x1x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x1x96xf32>) dkv(%dkv : memref<?x1x96xbf16>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 1, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}

// Four heads in two head blocks of 2: block g stages rows 2g and 2g + 1.
// MAP-LABEL: gpu.func @head_blocks_bwd
// MAP-SAME: smla.grid = ["T", "2", "1"]
// MAP-SAME: smla.staged = ["q", "do"]
// MAP: %[[T2:block_id_x]] = gpu.block_id x
// MAP-NEXT: %[[G2:block_id_y]] = gpu.block_id y
// MAP: gpu.thread_id x
// MAP-NEXT: %[[Z2:.*]] = arith.constant 0 : index
// MAP-NEXT: %[[HB2:.*]] = arith.constant 2 : index
// MAP-NEXT: %[[FIRST2:.*]] = arith.muli %[[G2]], %[[HB2]] : index
// MAP: %[[QV2:.*]] = memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [1, 2, 96], strides: [208, 104, 1]
// MAP: %[[ROW2:.*]] = arith.addi %[[FIRST2]], %{{.*}} : index
// MAP-NEXT: nvgpu.device_async_copy %{{.*}}[%[[T2]], %[[ROW2]], %{{.*}}], %[[QV2]][%[[Z2]], %{{.*}}, %{{.*}}]
// MAP: %[[DV2:.*]] = memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [1, 2, 64], strides: [144, 72, 1]
// MAP: smla.tile_dot %[[QV2]][%[[Z2]], %[[Z2]]]
// MAP: smla.tile_dot %[[DV2]][%[[Z2]], %[[Z2]]]
// MAP: smla.scatter_dkv %{{.*}}, %{{.*}}, %[[QV2]], %[[DV2]][%[[Z2]], %[[Z2]]]
func.func @head_blocks(%q: memref<?x4x96xbf16>, %kv: memref<?x1x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x1x96xf32>, %dkv: memref<?x1x96xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x1x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x1x96xf32>) dkv(%dkv : memref<?x1x96xbf16>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 1, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, headBlocks = 2>, sm_scale = 0.102 : f32}
  return
}
