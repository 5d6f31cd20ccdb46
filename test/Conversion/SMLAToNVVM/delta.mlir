// RUN: smla-opt --smla-guarded --smla-gpu-map --smla-allocate-smem --smla-lower-to-nvvm %s | FileCheck %s
// RUN: smla-opt --smla-guarded --smla-gpu-map="mma=false" --smla-allocate-smem --smla-lower-to-nvvm="mma=false" %s | FileCheck %s --check-prefix=SMALL
// RUN: smla-opt --smla-guarded --smla-gpu-map --smla-allocate-smem --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=GIVEN

// delta[h] = sum_c o[t, h, c] do[t, h, c] in the kernel's prologue, on
// every warp: row h on 16 consecutive lanes (D = 512: 64 chunks of 8
// columns, 4 per lane, all loaded at once; chunk k of a lane is k * 16 +
// its place in the row, so that a warp's loads cover 256 contiguous
// bytes of each row), the partial sums added by a butterfly of shfl.xor
// 8, 4, 2, 1 over the whole warp, the first lane of the row storing it.
// 16 rows x 16 lanes: one item per thread of the 256.
// CHECK-LABEL: gpu.func @glm_bwd
// CHECK: scf.for %[[E:.*]] = %thread_id_x to %c256{{.*}} step %c256
// CHECK: %[[ROW:.*]] = arith.divui %[[E]], %c16
// CHECK: %[[PART:.*]] = arith.remui %[[E]], %c16
// CHECK: %[[LIVE:.*]] = arith.cmpi ult, %[[ROW]], %c16
// CHECK: %[[SUM:.*]] = scf.if %[[LIVE]] -> (f32) {
// CHECK: arith.addi %[[PART]], %c0
// CHECK: vector.load %{{.*}} : memref<?x16x512xbf16>, vector<8xbf16>
// CHECK: vector.load %{{.*}} : memref<?x16x512xbf16>, vector<8xbf16>
// CHECK: arith.addi %[[PART]], %c16
// CHECK: vector.load %{{.*}} : memref<?x16x512xbf16>, vector<8xbf16>
// CHECK: vector.load %{{.*}} : memref<?x16x512xbf16>, vector<8xbf16>
// CHECK: arith.addi %[[PART]], %c32
// CHECK: vector.load
// CHECK: vector.load
// CHECK: arith.addi %[[PART]], %c48
// CHECK: vector.load
// CHECK: vector.load
// CHECK-NOT: vector.load
// CHECK: vector.reduction <add>
// CHECK: } else {
// CHECK: gpu.shuffle xor %[[SUM]], %c8_i32, %c32_i32
// CHECK: gpu.shuffle xor %{{.*}}, %c4_i32
// CHECK: gpu.shuffle xor %{{.*}}, %c2_i32
// CHECK: gpu.shuffle xor %{{.*}}, %c1_i32
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[PART]], %c0
// CHECK: %[[STORE:.*]] = arith.andi %[[LIVE]], %[[FIRST]]
// CHECK: scf.if %[[STORE]] {
// CHECK-NEXT: memref.store %{{.*}}[%[[ROW]]] : memref<16xf32, #gpu.address_space<workgroup>>
// The first barrier after it orders the stores before delta's readers.
// CHECK: gpu.barrier
func.func @glm(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %dout: memref<?x16x512xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %dkv_accum: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%dout : memref<?x16x512xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%dkv_accum : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 32, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}

// Two rows of D = 64 (8 chunks): 8 lanes a row, one chunk each, and the
// 16 items rounded up to a whole warp: lanes 16-31 load nothing (their
// row is past the last) but add zeros in the shuffles xor 4, 2, 1.
// SMALL-LABEL: gpu.func @small_bwd
// SMALL: scf.for %[[E:.*]] = %thread_id_x to %c32 step %c256
// SMALL: %[[ROW:.*]] = arith.divui %[[E]], %c8
// SMALL: %[[LIVE:.*]] = arith.cmpi ult, %[[ROW]], %c2
// SMALL: scf.if %[[LIVE]] -> (f32) {
// SMALL-COUNT-2: vector.load %{{.*}} : memref<?x4x64xbf16>, vector<8xbf16>
// SMALL-NOT: vector.load
// SMALL: } else {
// SMALL-NEXT: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// SMALL-NEXT: scf.yield %[[ZERO]] : f32
// SMALL-NOT: gpu.shuffle xor %{{.*}}, %c8_i32
// SMALL: gpu.shuffle xor %{{.*}}, %c4_i32, %c32_i32
// SMALL: gpu.shuffle xor %{{.*}}, %c2_i32
// SMALL: gpu.shuffle xor %{{.*}}, %c1_i32
// SMALL: memref.store %{{.*}}[%[[ROW]]] : memref<2xf32, #gpu.address_space<workgroup>>
func.func @small(%q: memref<?x4x96xbf16>, %kv: memref<?x2x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x2x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x2x96xf32>, %dkv: memref<?x2x96xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x2x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x2x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x2x96xf32>) dkv(%dkv : memref<?x2x96xbf16>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 2, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}

// With the caller's Delta the bwd kernel takes a `delta` parameter: a
// null pointer runs the lane-group sum above, any other is read, one
// thread per row. The `delta` kernel fills such a buffer: one CTA per
// (token, head block), the same sum stored to global memory.
// GIVEN-LABEL: gpu.func @given_bwd
// GIVEN-SAME: smla.params = ["q", "kv", "o", "do", "indices", "lse", "dq", "dkv_accum", "delta", "T", "S_kv", "K", "sm_scale", "walk_period"]
// GIVEN: %[[PTR:.*]] = memref.extract_aligned_pointer_as_index %{{.*}} : memref<?x16xf32> -> index
// GIVEN: %[[NONE:.*]] = arith.cmpi eq, %[[PTR]], %{{.*}} : index
// GIVEN: scf.if %[[NONE]] {
// GIVEN: gpu.shuffle xor
// GIVEN: } else {
// GIVEN: scf.for %[[H:.*]] = %thread_id_x to %c16{{.*}} step %c256
// GIVEN: %[[ROW:.*]] = arith.addi %{{.*}}, %[[H]] : index
// GIVEN: %[[V:.*]] = memref.load %{{.*}}[%block_id_x, %[[ROW]]] : memref<?x16xf32>
// GIVEN: memref.store %[[V]], %{{.*}}[%[[H]]] : memref<16xf32, #gpu.address_space<workgroup>>
// GIVEN-LABEL: gpu.func @given_delta
// GIVEN-SAME: smla.grid = ["T", "1", "1"], smla.kind = "delta", smla.params = ["o", "do", "delta", "T"]
// GIVEN: gpu.shuffle xor
// GIVEN: memref.store %{{.*}} : memref<16xf32, strided<[1], offset: ?>>
func.func @given(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %dout: memref<?x16x512xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %dkv_accum: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %delta: memref<?x16xf32>) {
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%dout : memref<?x16x512xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%dkv_accum : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) delta(%delta : memref<?x16xf32>) {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 32, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}
