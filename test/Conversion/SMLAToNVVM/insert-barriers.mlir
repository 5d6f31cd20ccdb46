// RUN: smla-opt --smla-guarded --smla-gpu-map --smla-allocate-smem --smla-insert-barriers %s | FileCheck %s

// Barriers only where two tile ops touch the same shared-memory bytes and
// one writes, across threads: after the gather (the block products read the
// keys), after both block products (softmax reads the scores), after
// softmax + dS (dQ reads dS across threads; dS reads P in the thread that
// wrote it, so none between them), and at the end of the block (the next
// gather overwrites the keys dQ read). None between the two block
// products, nor between dQ and the dKV scatter.

// CHECK-LABEL: gpu.func @small_bwd
// CHECK: smla.delta
// CHECK: linalg.fill
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: scf.for
// CHECK: smla.gather
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: smla.tile_dot
// CHECK-NEXT: smla.tile_dot
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: smla.softmax
// CHECK-NEXT: smla.dscores
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: smla.dq_accumulate
// CHECK-NOT: gpu.barrier
// CHECK: smla.scatter_dkv
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: }
// CHECK-NOT: gpu.barrier
// CHECK: smla.store_dq

func.func @small(%q: memref<?x4x96xbf16>, %kv: memref<?x2x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x2x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x2x96xf32>, %dkv: memref<?x2x96xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x2x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x2x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x2x96xf32>) dkv(%dkv : memref<?x2x96xbf16>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 2, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}
