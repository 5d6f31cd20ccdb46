// RUN: smla-opt %s -split-input-file --smla-insert-index-masks -verify-diagnostics | FileCheck %s
// Idempotence: a second run changes nothing.
// RUN: smla-opt %s -split-input-file --smla-insert-index-masks -verify-diagnostics > %t.once
// RUN: smla-opt %t.once -split-input-file --smla-insert-index-masks > %t.twice
// RUN: diff %t.once %t.twice

// CHECK-LABEL: func.func @block
// CHECK-SAME: (%[[KV:.*]]: memref<?x1x48xbf16>, %[[IDXS:.*]]: memref<?x1x?xi32>, %[[ACC:.*]]: memref<?x1x48xf32>, %{{.*}}: memref<?x4x48xbf16>, %{{.*}}: memref<?x4x32xbf16>, %[[CNT:.*]]: memref<4xi64>, %[[T:.*]]: index, %[[G:.*]]: index, %[[K0:.*]]: index, %[[POS:.*]]: i32)
// CHECK: %[[I:.*]] = smla.index_load %[[IDXS]][%[[T]], %[[G]], %[[K0]]] limit %[[POS]] counters(%[[CNT]] : memref<4xi64>)
// The gather's mask: bounded by dim 0 of kv, the tail lane count
// min(K - offset, 16), the position limit, and it counts invalid slots.
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[S:.*]] = memref.dim %[[KV]], %[[C0]] : memref<?x1x48xbf16>
// CHECK-DAG: %[[K:.*]] = memref.dim %[[IDXS]], %[[C2]] : memref<?x1x?xi32>
// CHECK: %[[LEFT:.*]] = arith.subi %[[K]], %[[K0]] : index
// CHECK: %[[N:.*]] = arith.minsi %[[LEFT]], %[[C16]] : index
// CHECK: %[[M:.*]] = smla.index_mask %[[I]] below %[[S]] lanes %[[N]] limit %[[POS]] counters(%[[CNT]] : memref<4xi64>) : vector<16xi32> -> vector<16xi1>
// CHECK: smla.gather %[[KV]][%[[G]]] rows(%[[I]]) mask(%[[M]] : vector<16xi1>)
// The scatter's mask is bounded by dim 0 of the dKV buffer it writes and
// does not count a second time.
// CHECK: %[[SA:.*]] = memref.dim %[[ACC]], %{{.*}} : memref<?x1x48xf32>
// CHECK: %[[MA:.*]] = smla.index_mask %[[I]] below %[[SA]] lanes %{{.*}} limit %[[POS]] : vector<16xi32> -> vector<16xi1>
// CHECK: smla.scatter_dkv {{.*}} rows(%[[I]]) mask(%[[MA]] : vector<16xi1>) into %[[ACC]]
func.func @block(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>,
                 %acc: memref<?x1x48xf32>, %q: memref<?x4x48xbf16>,
                 %do: memref<?x4x32xbf16>, %cnt: memref<4xi64>, %t: index,
                 %g: index, %k0: index, %pos: i32) {
  %keys = memref.alloca() : memref<16x48xbf16>
  %ds = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] limit %pos counters(%cnt : memref<4xi64>)
      : memref<?x1x?xi32> -> vector<16xi32>
  smla.gather %kv[%g] rows(%i) into %keys
      : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.scatter_dkv %ds, %ds, %q, %do[%t, %g] rows(%i) into %acc[%g]
      : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>,
        vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

// Two gathers of the same tensor through the same index block share one mask.
// CHECK-LABEL: func.func @shared
// CHECK-COUNT-1: smla.index_mask
// CHECK-NOT: smla.index_mask
func.func @shared(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>,
                  %t: index, %k0: index) {
  %keys = memref.alloca() : memref<16x48xbf16>
  %i = smla.index_load %idxs[%t, %t, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  smla.gather %kv[%t] rows(%i) into %keys
      : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.gather %kv[%t] rows(%i) into %keys
      : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}
