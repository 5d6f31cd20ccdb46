// RUN: smla-opt %s --smla-guarded | FileCheck %s
// A step of two tokens (config tokens = 2): q, o, dout, lse and dq hold the
// rows of tokens 2t and 2t + 1; indices and positions stay per token.

// CHECK-LABEL: func.func @pair
// CHECK-SAME: (%[[Q:[^:]*]]: memref<?x4x48xbf16>, %[[KV:[^:]*]]: memref<?x1x48xbf16>, %{{[^:]*}}: memref<?x4x32xbf16>, %[[DO:[^:]*]]: memref<?x4x32xbf16>, %[[IDX:[^:]*]]: memref<?x1x?xi32>, %[[LSE:[^:]*]]: memref<?x4xf32>, %[[POS:[^:]*]]: memref<?xi32>, %{{[^:]*}}: memref<?x4x48xf32>, %[[ACC:[^:]*]]: memref<?x1x48xf32>
// The folded token loop runs over dim 0 of q (T / 2).
// CHECK: %[[T:.*]] = memref.dim %[[Q]], %{{.*}} : memref<?x4x48xbf16>
// CHECK: scf.for %[[TI:.*]] = %{{.*}} to %[[T]]
// CHECK:   %[[TA:.*]] = arith.muli %[[TI]], %[[C2:.*]] : index
// CHECK:   %[[TB:.*]] = arith.addi %[[TA]], %{{.*}} : index
// CHECK:   %[[LA:.*]] = memref.load %[[POS]][%[[TA]]] : memref<?xi32>
// CHECK:   %[[LB:.*]] = memref.load %[[POS]][%[[TB]]] : memref<?xi32>
// Each token's block, with its own limit, masked against kv and counted.
// CHECK:   %[[IA:.*]] = smla.index_load %[[IDX]][%[[TA]], %{{.*}}, %[[K0:.*]]] limit %[[LA]] counters
// CHECK:   %[[MA:.*]] = smla.index_mask %[[IA]] below %[[SKV:[^ ]*]] lanes %{{.*}} limit %[[LA]] counters
// CHECK:   %[[IB:.*]] = smla.index_load %[[IDX]][%[[TB]], %{{.*}}, %[[K0]]] limit %[[LB]] counters
// CHECK:   %[[MB:.*]] = smla.index_mask %[[IB]] below %{{.*}} lanes %{{.*}} limit %[[LB]] counters
// CHECK:   %[[U:[^,]*]], %[[M:[^,]*]], %[[KB:[^ ]*]] = smla.index_pair %[[IA]] mask(%[[MA]]), %[[IB]] mask(%[[MB]])
// CHECK:   smla.gather %[[KV]][%{{.*}}] rows(%[[U]]) mask(%[[M]] : vector<16xi1>)
// Rows 0-1 (token 2t) use its mask, rows 2-3 (token 2t + 1) the lanes that
// hold its own valid keys.
// CHECK:   smla.softmax %{{.*}}, %[[LSE]][%[[TI]], %{{.*}}] mask(%[[MA]] : vector<16xi1>) pair_mask(%[[KB]] : vector<16xi1>) live
// The scatter gets its own pair, masked against dKV, without counters.
// CHECK:   %[[SA:.*]] = smla.index_mask %[[IA]] below %[[DA:[^ ]*]] lanes %{{.*}} limit %[[LA]] :
// CHECK:   %[[SB:.*]] = smla.index_mask %[[IB]] below %{{.*}} lanes %{{.*}} limit %[[LB]] :
// CHECK:   %[[SU:[^,]*]], %[[SM:[^,]*]], %{{[^ ]*}} = smla.index_pair %[[IA]] mask(%[[SA]]), %[[IB]] mask(%[[SB]])
// CHECK:   smla.scatter_dkv %{{.*}}, %{{.*}}, %[[Q]], %[[DO]][%[[TI]], %{{.*}}] rows(%[[SU]]) mask(%[[SM]] : vector<16xi1>) into %[[ACC]]
func.func @pair(%q: memref<?x4x48xbf16>, %kv: memref<?x1x48xbf16>,
                %o: memref<?x4x32xbf16>, %do: memref<?x4x32xbf16>,
                %idx: memref<?x1x?xi32>, %lse: memref<?x4xf32>,
                %pos: memref<?xi32>, %dq: memref<?x4x48xf32>,
                %acc: memref<?x1x48xf32>, %dkv: memref<?x1x48xbf16>,
                %cnt: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x48xbf16>)
      kv(%kv : memref<?x1x48xbf16>) o(%o : memref<?x4x32xbf16>)
      dout(%do : memref<?x4x32xbf16>) indices(%idx : memref<?x1x?xi32>)
      lse(%lse : memref<?x4xf32>) positions(%pos : memref<?xi32>)
      dq(%dq : memref<?x4x48xf32>) dkv_accum(%acc : memref<?x1x48xf32>)
      dkv(%dkv : memref<?x1x48xbf16>) counters(%cnt : memref<4xi64>)
      {config = #smla.config<d = 32, dt = 16, heads = 4, groups = 1,
          block = 16, lseBase = base2, positions = true, dqType = f32,
          dkvType = bf16, tokens = 2>, sm_scale = 0.125 : f32}
  return
}
