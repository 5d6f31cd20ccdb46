// RUN: smla-opt --smla-guarded --smla-gpu-map %s | FileCheck %s

// The top-k block loop of a bwd kernel walks its blocks from a rotated
// start: at step j it runs block (j + j0) mod n, with
// j0 = (cta * n / walk_period) mod n for walk_period > 0 and 0 otherwise,
// cta = blockIdx.x + T * blockIdx.y. The start is computed once, before the
// loop; the loop keeps its bounds, so every block runs exactly once, and
// every use of the step index (the slot offset, hence the index masks) sees
// the rotated block.

// CHECK-LABEL: gpu.func @small_bwd
// CHECK-SAME: %[[T:arg8]]: i32, %arg9: i32, %arg10: i32, %arg11: f32, %[[P:arg12]]: i32) kernel
// CHECK-SAME: smla.params = [{{.*}}"sm_scale", "walk_period"]
// CHECK: %[[TOK:.*]] = arith.index_cast %[[T]] : i32 to index
// CHECK: %[[N:.*]] = arith.ceildivui %{{.*}}, %c16{{.*}} : index
// CHECK: %[[Y:.*]] = arith.muli %block_id_y, %[[TOK]] : index
// CHECK: %[[CTA:.*]] = arith.addi %block_id_x, %[[Y]] {smla.walk_cta} : index
// CHECK: %[[NS:.*]] = arith.maxui %[[N]], %c1{{.*}} : index
// CHECK: %[[ON:.*]] = arith.cmpi sgt, %[[P]], %c0_i32 : i32
// CHECK: %[[PI:.*]] = arith.index_cast %[[P]] : i32 to index
// CHECK: %[[PS:.*]] = arith.select %[[ON]], %[[PI]], %c1{{.*}} : index
// CHECK: %[[M:.*]] = arith.muli %[[CTA]], %[[NS]] : index
// CHECK: %[[PH:.*]] = arith.divui %[[M]], %[[PS]] : index
// CHECK: %[[R:.*]] = arith.remui %[[PH]], %[[NS]] : index
// CHECK: %[[J0:.*]] = arith.select %[[ON]], %[[R]], %c0{{.*}} : index
// CHECK: scf.for %[[J:.*]] = %c0{{.*}} to %[[N]] step %c1{{.*}} {
// CHECK-NEXT: %[[S:.*]] = arith.addi %[[J]], %[[J0]] : index
// CHECK-NEXT: %[[W:.*]] = arith.cmpi uge, %[[S]], %[[N]] : index
// CHECK-NEXT: %[[SUB:.*]] = arith.subi %[[S]], %[[N]] : index
// CHECK-NEXT: %[[B:.*]] = arith.select %[[W]], %[[SUB]], %[[S]] : index
// CHECK-NEXT: %[[OFF:.*]] = arith.muli %[[B]], %c16{{.*}} : index
// The raw step index has no other use in the loop.
// CHECK-NOT: arith.muli %[[J]]
// CHECK: smla.index_load {{.*}}, %[[OFF]]]
// CHECK: smla.scatter_dkv
// CHECK: }

func.func @small(%q: memref<?x4x96xbf16>, %kv: memref<?x2x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x2x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x2x96xf32>, %dkv: memref<?x2x96xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x2x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x2x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x2x96xf32>) dkv(%dkv : memref<?x2x96xbf16>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 2, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}
