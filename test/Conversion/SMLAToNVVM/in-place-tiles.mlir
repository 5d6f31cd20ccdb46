// RUN: smla-opt --smla-guarded --smla-gpu-map %s | FileCheck %s
// RUN: smla-opt --smla-gpu-kernels %s | FileCheck %s --check-prefix=SMEM

// softmax and dscores are elementwise (element (h, j) read and written by
// one thread), and nothing but them reads the scores and dP tiles:
// smla-gpu-map writes P over the scores and dS over dP, so a block needs
// two [Hb, B] f32 tiles of shared memory, not four.

// CHECK-LABEL: gpu.func @tiles_bwd
// CHECK: %[[S:.*]] = memref.alloca() : memref<4x16xf32, #gpu.address_space<workgroup>>
// CHECK-NEXT: %[[DP:.*]] = memref.alloca() : memref<4x16xf32, #gpu.address_space<workgroup>>
// CHECK-NOT: memref.alloca() : memref<4x16xf32
// CHECK: smla.tile_dot %{{.*}}, %{{.*}} into %[[S]]
// CHECK: smla.tile_dot %{{.*}}, %{{.*}} into %[[DP]]
// CHECK: smla.softmax %[[S]], {{.*}} into %[[S]]
// CHECK: smla.dscores %[[S]], %[[DP]], %{{.*}} into %[[DP]]
// CHECK: smla.dq_accumulate %[[DP]]
// CHECK: smla.scatter_dkv %[[DP]], %[[S]]

// Key tile 16 x 104 bf16 (3328), two f32 tiles 4 x 16 (256 each), delta
// (128), staged q 4 x 104 bf16 (896 after 128-byte alignment) and do 4 x 72
// bf16 (640); the dQ accumulator (4 x 104 f32) is in registers.
// SMEM-LABEL: gpu.func @tiles_bwd
// SMEM-SAME: smla.dynamic_smem = 5504
func.func @tiles(%q: memref<?x4x96xbf16>, %kv: memref<?x1x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x1x96xf32>, %dkv: memref<?x1x96xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x1x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x1x96xf32>) dkv(%dkv : memref<?x1x96xbf16>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 1, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}
