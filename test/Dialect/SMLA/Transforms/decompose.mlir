// RUN: smla-opt %s --smla-decompose | FileCheck %s
// The decomposition alone is unguarded: the verifier must refuse its output.
// RUN: not smla-opt %s --smla-decompose --smla-verify-guards 2>&1 | FileCheck %s --check-prefix=REFUSED

// CHECK-LABEL: func.func @small
// CHECK-SAME: (%[[Q:.*]]: memref<?x4x48xbf16>, %[[KV:.*]]: memref<?x2x48xbf16>, %[[O:.*]]: memref<?x4x32xbf16>, %[[DO:.*]]: memref<?x4x32xbf16>, %[[IDX:.*]]: memref<?x2x?xi32>, %[[LSE:.*]]: memref<?x4xf32>, %[[POS:.*]]: memref<?xi32>, %[[DQ:.*]]: memref<?x4x48xf32>, %[[ACC:.*]]: memref<?x2x48xf32>, %[[DKV:.*]]: memref<?x2x48xbf16>, %[[CNT:.*]]: memref<4xi64>)
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C2G:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[T:.*]] = memref.dim %[[Q]], %{{.*}} : memref<?x4x48xbf16>
// CHECK-DAG: %[[K:.*]] = memref.dim %[[IDX]], %{{.*}} : memref<?x2x?xi32>
// Any top-k >= 1: ceil(K / block) blocks, the tail masked later.
// CHECK: %[[NB:.*]] = arith.ceildivui %[[K]], %[[C16]] : index
// Scratch tiles: gathered keys in bf16, the rest in f32, Hg = 2 heads.
// CHECK: %[[KEYS:.*]] = memref.alloca() : memref<16x48xbf16>
// CHECK: %[[S:.*]] = memref.alloca() : memref<2x16xf32>
// CHECK: %[[P:.*]] = memref.alloca() : memref<2x16xf32>
// CHECK: %[[DP:.*]] = memref.alloca() : memref<2x16xf32>
// CHECK: %[[DS:.*]] = memref.alloca() : memref<2x16xf32>
// CHECK: %[[DQA:.*]] = memref.alloca() : memref<2x48xf32>
// CHECK: %[[DELTA:.*]] = memref.alloca() : memref<2xf32>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[ACC]] : memref<?x2x48xf32>)
// CHECK: scf.for %[[TI:.*]] = %{{.*}} to %[[T]]
// CHECK:   %[[LIM:.*]] = memref.load %[[POS]][%[[TI]]] : memref<?xi32>
// CHECK:   scf.for %[[GI:.*]] = %{{.*}} to %[[C2G]]
// CHECK:     smla.delta %[[O]], %[[DO]][%[[TI]], %[[GI]]] into %[[DELTA]]
// CHECK:     linalg.fill ins(%{{.*}} : f32) outs(%[[DQA]] : memref<2x48xf32>)
// CHECK:     scf.for %[[B:.*]] = %{{.*}} to %[[NB]]
// CHECK:       %[[K0:.*]] = arith.muli %[[B]], %[[C16]] : index
// CHECK:       %[[I:.*]] = smla.index_load %[[IDX]][%[[TI]], %[[GI]], %[[K0]]] limit %[[LIM]] counters(%[[CNT]] : memref<4xi64>) : memref<?x2x?xi32> -> vector<16xi32>
// CHECK:       smla.gather %[[KV]][%[[GI]]] rows(%[[I]]) into %[[KEYS]]
// Both block products read only the gathered tile, so they come first.
// CHECK:       smla.tile_dot %[[Q]][%[[TI]], %[[GI]]], %[[KEYS]] into %[[S]]
// CHECK:       smla.tile_dot %[[DO]][%[[TI]], %[[GI]]], %[[KEYS]] into %[[DP]]
// CHECK:       smla.softmax %[[S]], %[[LSE]][%[[TI]], %[[GI]]] counters(%[[CNT]] : memref<4xi64>) into %[[P]] {base = #smla<lse_base base2>, scale = 1.250000e-01 : f32}
// CHECK:       smla.dscores %[[P]], %[[DP]], %[[DELTA]] into %[[DS]] {scale = 1.250000e-01 : f32}
// CHECK:       smla.dq_accumulate %[[DS]], %[[KEYS]] into %[[DQA]]
// CHECK:       smla.scatter_dkv %[[DS]], %[[P]], %[[Q]], %[[DO]][%[[TI]], %[[GI]]] rows(%[[I]]) into %[[ACC]][%[[GI]]]
// CHECK:     }
// CHECK:     smla.store_dq %[[DQA]] into %[[DQ]][%[[TI]], %[[GI]]] counters(%[[CNT]] : memref<4xi64>)
// CHECK: smla.cast_dkv %[[ACC]] into %[[DKV]] counters(%[[CNT]] : memref<4xi64>)
// CHECK-NOT: smla.sparse_attention_bwd
// REFUSED: error: 'smla.gather' op is an unguarded gather: has no index mask
// REFUSED: error: 'smla.softmax' op is an unguarded exponential: has no clamp
// REFUSED: error: 'smla.scatter_dkv' op is an unguarded scatter: has no index mask
func.func @small(%q: memref<?x4x48xbf16>, %kv: memref<?x2x48xbf16>,
                 %o: memref<?x4x32xbf16>, %do: memref<?x4x32xbf16>,
                 %idx: memref<?x2x?xi32>, %lse: memref<?x4xf32>,
                 %pos: memref<?xi32>, %dq: memref<?x4x48xf32>,
                 %acc: memref<?x2x48xf32>, %dkv: memref<?x2x48xbf16>,
                 %cnt: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x48xbf16>)
      kv(%kv : memref<?x2x48xbf16>) o(%o : memref<?x4x32xbf16>)
      dout(%do : memref<?x4x32xbf16>) indices(%idx : memref<?x2x?xi32>)
      lse(%lse : memref<?x4xf32>) positions(%pos : memref<?xi32>)
      dq(%dq : memref<?x4x48xf32>) dkv_accum(%acc : memref<?x2x48xf32>)
      dkv(%dkv : memref<?x2x48xbf16>) counters(%cnt : memref<4xi64>)
      {config = #smla.config<d = 32, dt = 16, heads = 4, groups = 2,
          block = 16, lseBase = base2, positions = true, dqType = f32,
          dkvType = bf16>, sm_scale = 0.125 : f32}
  return
}

// Without positions the index loads carry no limit; with an f32 dkv and no
// counters there is no final cast; the natural-log base is kept on the
// softmax.
// CHECK-LABEL: func.func @plain
// CHECK-NOT: memref.load
// CHECK: smla.index_load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : memref<?x1x?xi32> -> vector<32xi32>
// CHECK: smla.softmax {{.*}}base = #smla<lse_base natural>
// CHECK-NOT: smla.cast_dkv
// CHECK: return
func.func @plain(%q: memref<?x20x64xbf16>, %kv: memref<?x1x64xbf16>,
                 %o: memref<?x20x64xbf16>, %idx: memref<?x1x?xi32>,
                 %lse: memref<?x20xf32>, %dq: memref<?x20x64xbf16>,
                 %acc: memref<?x1x64xf32>) {
  smla.sparse_attention_bwd q(%q : memref<?x20x64xbf16>)
      kv(%kv : memref<?x1x64xbf16>) o(%o : memref<?x20x64xbf16>)
      dout(%o : memref<?x20x64xbf16>) indices(%idx : memref<?x1x?xi32>)
      lse(%lse : memref<?x20xf32>) dq(%dq : memref<?x20x64xbf16>)
      dkv_accum(%acc : memref<?x1x64xf32>)
      {config = #smla.config<d = 64, dt = 0, heads = 20, groups = 1,
          block = 32, lseBase = natural, positions = false, dqType = bf16,
          dkvType = f32>, sm_scale = 0.125 : f32}
  return
}

// Split heads: 2 groups of 4 heads, 2 head blocks of 2 heads per group. The
// step loop runs over the 4 head blocks; kv and the indices are read for the
// group hb / 2, the per-head ops for the head block. Every block loads the
// group's indices, but only the first block of a group counts invalid slots
// (a counting mask whose lane count is 0 in the other blocks).
// CHECK-LABEL: func.func @split
// CHECK-SAME: %[[KV:[^:]*]]: memref<?x2x48xbf16>
// CHECK-SAME: %[[ACC:[^:]*]]: memref<?x2x48xf32>, %[[CNT:[^:]*]]: memref<4xi64>
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK: memref.alloca() : memref<16x48xbf16>
// CHECK: %[[S:.*]] = memref.alloca() : memref<2x16xf32>
// CHECK: memref.alloca() : memref<2x48xf32>
// CHECK: memref.alloca() : memref<2xf32>
// CHECK: scf.for %[[TI:.*]] = %{{.*}} to %{{.*}}
// CHECK:   scf.for %[[HB:.*]] = %{{.*}} to %[[C4]]
// CHECK:     %[[G:.*]] = arith.divui %[[HB]], %{{.*}} : index
// CHECK:     smla.delta %{{.*}}[%[[TI]], %[[HB]]]
// CHECK:     scf.for
// CHECK:       %[[I:.*]] = smla.index_load %{{.*}}[%[[TI]], %[[G]], %{{.*}}] : memref<?x2x?xi32> -> vector<16xi32>
// CHECK:       %[[R:.*]] = arith.remui %[[HB]], %{{.*}} : index
// CHECK:       %[[FIRST:.*]] = arith.cmpi eq, %[[R]], %{{.*}} : index
// CHECK:       %[[N:.*]] = arith.select %[[FIRST]], %{{.*}}, %{{.*}} : index
// CHECK:       smla.index_mask %[[I]] below %{{.*}} lanes %[[N]] counters(%[[CNT]] : memref<4xi64>)
// CHECK:       smla.gather %[[KV]][%[[G]]] rows(%[[I]]) into
// CHECK:       smla.tile_dot %{{.*}}[%[[TI]], %[[HB]]], %{{.*}} into %[[S]]
// CHECK:       smla.softmax %[[S]], %{{.*}}[%[[TI]], %[[HB]]]
// CHECK:       smla.scatter_dkv %{{.*}}[%[[TI]], %[[HB]]] rows(%[[I]]) into %[[ACC]][%[[G]]]
// CHECK:     smla.store_dq %{{.*}} into %{{.*}}[%[[TI]], %[[HB]]] counters(%[[CNT]] : memref<4xi64>)
// An f32 dkv is the accumulator itself: a cast that only counts.
// CHECK: smla.cast_dkv %{{.*}} counters(%[[CNT]] : memref<4xi64>) : memref<?x2x48xf32>{{$}}
func.func @split(%q: memref<?x8x48xbf16>, %kv: memref<?x2x48xbf16>,
                 %o: memref<?x8x32xbf16>, %idx: memref<?x2x?xi32>,
                 %lse: memref<?x8xf32>, %dq: memref<?x8x48xf32>,
                 %acc: memref<?x2x48xf32>, %cnt: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x8x48xbf16>)
      kv(%kv : memref<?x2x48xbf16>) o(%o : memref<?x8x32xbf16>)
      dout(%o : memref<?x8x32xbf16>) indices(%idx : memref<?x2x?xi32>)
      lse(%lse : memref<?x8xf32>) dq(%dq : memref<?x8x48xf32>)
      dkv_accum(%acc : memref<?x2x48xf32>) counters(%cnt : memref<4xi64>)
      {config = #smla.config<d = 32, dt = 16, heads = 8, groups = 2,
          block = 16, lseBase = base2, positions = false, dqType = f32,
          dkvType = f32, headBlocks = 2>, sm_scale = 0.125 : f32}
  return
}

// The caller's Delta goes to every smla.delta as `given`. With topk_length
// a token has n = min(K, max(0, length[t])) slots: its index loads read
// below n, its masks count lanes below n, and its block loop stops at
// ceil(n / block).
// CHECK-LABEL: func.func @lengths
// CHECK-SAME: %[[IDX:[a-z0-9]*]]: memref<?x1x?xi32>, %{{.*}}: memref<?x4xf32>, %{{.*}}: memref<?x4x48xf32>, %{{.*}}: memref<?x1x48xf32>, %{{.*}}: memref<4xi64>, %[[D:[a-z0-9]*]]: memref<?x4xf32>, %[[LEN:[a-z0-9]*]]: memref<?xi32>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[K:.*]] = memref.dim %[[IDX]], %{{.*}} : memref<?x1x?xi32>
// CHECK: scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step
// CHECK:   %[[L:.*]] = memref.load %[[LEN]][%[[T]]] : memref<?xi32>
// CHECK:   %[[LI:.*]] = arith.index_cast %[[L]] : i32 to index
// CHECK:   %[[POS:.*]] = arith.maxsi %[[LI]], %[[C0]] : index
// CHECK:   %[[N:.*]] = arith.minsi %[[POS]], %[[K]] : index
// CHECK:   %[[NB:.*]] = arith.ceildivui %[[N]], %[[C16]] : index
// CHECK:   scf.for
// CHECK:     smla.delta %{{.*}}[%[[T]], %{{.*}}] given(%[[D]] : memref<?x4xf32>) into
// CHECK:     scf.for %[[B:.*]] = %{{.*}} to %[[NB]] step
// CHECK:       %[[K0:.*]] = arith.muli %[[B]], %[[C16]] : index
// CHECK:       smla.index_load %[[IDX]][%[[T]], %{{.*}}, %[[K0]]] length %[[N]] counters
func.func @lengths(%q: memref<?x4x48xbf16>, %kv: memref<?x1x48xbf16>,
                   %o: memref<?x4x32xbf16>, %idx: memref<?x1x?xi32>,
                   %lse: memref<?x4xf32>, %dq: memref<?x4x48xf32>,
                   %acc: memref<?x1x48xf32>, %cnt: memref<4xi64>,
                   %delta: memref<?x4xf32>, %len: memref<?xi32>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x48xbf16>)
      kv(%kv : memref<?x1x48xbf16>) o(%o : memref<?x4x32xbf16>)
      dout(%o : memref<?x4x32xbf16>) indices(%idx : memref<?x1x?xi32>)
      lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x48xf32>)
      dkv_accum(%acc : memref<?x1x48xf32>) counters(%cnt : memref<4xi64>)
      delta(%delta : memref<?x4xf32>) topk_length(%len : memref<?xi32>)
      {config = #smla.config<d = 32, dt = 16, heads = 4, groups = 1,
          block = 16, lseBase = base2, positions = false, dqType = f32,
          dkvType = f32>, sm_scale = 0.125 : f32}
  return
}
