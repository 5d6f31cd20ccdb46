// RUN: smla-opt %s --smla-decompose --smla-insert-index-masks --smla-insert-softmax-guards | FileCheck %s
// Idempotence: a second run changes nothing.
// RUN: smla-opt %s --smla-decompose --smla-insert-index-masks --smla-insert-softmax-guards > %t.once
// RUN: smla-opt %t.once --smla-insert-softmax-guards > %t.twice
// RUN: diff %t.once %t.twice

// CHECK-LABEL: func.func @guards
// CHECK-SAME: %[[LSE:[a-z0-9]+]]: memref<?x4xf32>, %{{.*}}: memref<?x4x48xf32>, %{{.*}}: memref<?x2x48xf32>, %[[CNT:.*]]: memref<4xi64>)
// CHECK: scf.for %[[T:.*]] =
// CHECK:   scf.for %[[G:.*]] =
// The dead-row guard is computed once per (token, group) row, before the
// top-k block loop, and counts dead rows.
// CHECK-NEXT: %[[LIVE:.*]] = smla.row_live %[[LSE]][%[[T]], %[[G]]] counters(%[[CNT]] : memref<4xi64>) : memref<?x4xf32> -> vector<2xi1>
// CHECK:     scf.for
// CHECK:       %[[MG:.*]] = smla.index_mask {{.*}} counters(%[[CNT]] : memref<4xi64>)
// CHECK:       smla.gather {{.*}} mask(%[[MG]] : vector<16xi1>) into %[[KEYS:[a-z0-9_]+]]
// CHECK:       smla.tile_dot {{.*}}, %[[KEYS]] into %[[S:[a-z0-9_]+]]
// The softmax takes the mask of the keys its scores come from, the live
// rows of its lse row, and the clamp.
// CHECK:       smla.softmax %[[S]], %[[LSE]][%[[T]], %[[G]]] mask(%[[MG]] : vector<16xi1>) live(%[[LIVE]] : vector<2xi1>) counters(%[[CNT]] : memref<4xi64>) into %{{.*}} {base = #smla<lse_base natural>, clamp = 3.200000e+01 : f32, scale = 1.250000e-01 : f32}
// CHECK-NOT: smla.row_live
func.func @guards(%q: memref<?x4x48xbf16>, %kv: memref<?x2x48xbf16>,
                  %o: memref<?x4x32xbf16>, %idx: memref<?x2x?xi32>,
                  %lse: memref<?x4xf32>, %dq: memref<?x4x48xf32>,
                  %acc: memref<?x2x48xf32>, %cnt: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x48xbf16>)
      kv(%kv : memref<?x2x48xbf16>) o(%o : memref<?x4x32xbf16>)
      dout(%o : memref<?x4x32xbf16>) indices(%idx : memref<?x2x?xi32>)
      lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x48xf32>)
      dkv_accum(%acc : memref<?x2x48xf32>) counters(%cnt : memref<4xi64>)
      {config = #smla.config<d = 32, dt = 16, heads = 4, groups = 2,
          block = 16, lseBase = natural, positions = false, dqType = f32,
          dkvType = f32>, sm_scale = 0.125 : f32}
  return
}
