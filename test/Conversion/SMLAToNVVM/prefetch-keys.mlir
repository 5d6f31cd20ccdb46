// RUN: smla-opt --smla-guarded --smla-gpu-map --smla-prefetch-keys %s | FileCheck %s
// RUN: smla-opt --smla-guarded --smla-gpu-map --smla-prefetch-keys --smla-allocate-smem --smla-verify-smem --smla-insert-barriers %s | FileCheck %s --check-prefix=BAR
// RUN: smla-opt --smla-guarded --smla-gpu-map="ctas-per-sm=2" --smla-prefetch-keys %s | FileCheck %s --check-prefix=TWO

// The key gather of a top-k block step is split: step j + 1's copies are
// issued right after step j's dQ accumulate (the last op reading the key
// tile) and land during step j's dKV scatter; step 0 issues its own first
// thing; each step waits for its copies where the unsplit gather was. An
// issue recomputes the rotated block, the index load, the tail lane count
// and the mask at the issued step, with no guard counters (the step's own
// mask counts its invalid slots once).

// CHECK-LABEL: gpu.func @small_bwd
// CHECK: scf.for %[[J:arg[0-9]+]] = %[[LB:c0[_0-9]*]] to %[[N:[0-9]+]] step %[[ONE:c1[_0-9]*]] {
// CHECK: %[[B:[0-9]+]] = arith.select
// CHECK-NEXT: %[[OFF:[0-9]+]] = arith.muli %[[B]], %c16{{.*}} : index
// CHECK-NEXT: %[[IDX:[0-9]+]] = smla.index_load %{{.*}}[%block_id_x, %block_id_y, %[[OFF]]] counters
// CHECK: %[[M:[0-9]+]] = smla.index_mask %[[IDX]] below %{{.*}} lanes %{{[0-9]+}} counters
// Step 0: its own copies, at step index 0.
// CHECK: %[[FIRST:[0-9]+]] = arith.cmpi eq, %[[J]], %[[LB]] : index
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: %[[S0:[0-9]+]] = arith.addi %[[LB]], %{{[0-9]+}} : index
// CHECK: %[[B0:[0-9]+]] = arith.select %{{[0-9]+}}, %{{[0-9]+}}, %[[S0]] : index
// CHECK-NEXT: %[[O0:[0-9]+]] = arith.muli %[[B0]], %c16{{.*}} : index
// CHECK-NEXT: %[[I0:[0-9]+]] = smla.index_load %{{.*}}[%block_id_x, %block_id_y, %[[O0]]] : memref<?x2x?xi32> -> vector<16xi32>
// CHECK: %[[R0:[0-9]+]] = arith.subi %{{.*}}, %[[O0]] : index
// CHECK-NEXT: %[[L0:[0-9]+]] = arith.minsi %[[R0]], %c16{{.*}} : index
// CHECK-NEXT: %[[M0:[0-9]+]] = smla.index_mask %[[I0]] below %{{.*}} lanes %[[L0]] : vector<16xi32> -> vector<16xi1>
// CHECK-NEXT: smla.gather %{{.*}}[%block_id_y] rows(%[[I0]]) mask(%[[M0]] : vector<16xi1>) into %[[KEYS:alloca[_0-9]*]] {issue_only}
// CHECK-NEXT: }
// The step's gather only waits; softmax keeps the step's own mask.
// CHECK-NEXT: smla.gather %{{.*}}[%block_id_y] rows(%[[IDX]]) mask(%[[M]] : vector<16xi1>) into %[[KEYS]] {wait_only}
// CHECK: smla.tile_dot
// CHECK: smla.softmax %{{.*}} mask(%[[M]] : vector<16xi1>)
// CHECK: smla.dq_accumulate %{{.*}}, %[[KEYS]] into
// The next step's copies, skipped after the last step.
// CHECK: %[[NEXT:[0-9]+]] = arith.addi %[[J]], %[[ONE]] : index
// CHECK-NEXT: %[[IN:[0-9]+]] = arith.cmpi ult, %[[NEXT]], %[[N]] : index
// CHECK-NEXT: scf.if %[[IN]] {
// CHECK-NEXT: %[[S1:[0-9]+]] = arith.addi %[[NEXT]], %{{[0-9]+}} : index
// CHECK: %[[B1:[0-9]+]] = arith.select %{{[0-9]+}}, %{{[0-9]+}}, %[[S1]] : index
// CHECK-NEXT: %[[O1:[0-9]+]] = arith.muli %[[B1]], %c16{{.*}} : index
// CHECK-NEXT: %[[I1:[0-9]+]] = smla.index_load %{{.*}}[%block_id_x, %block_id_y, %[[O1]]] : memref<?x2x?xi32> -> vector<16xi32>
// CHECK: %[[R1:[0-9]+]] = arith.subi %{{.*}}, %[[O1]] : index
// CHECK-NEXT: %[[L1:[0-9]+]] = arith.minsi %[[R1]], %c16{{.*}} : index
// CHECK-NEXT: %[[M1:[0-9]+]] = smla.index_mask %[[I1]] below %{{.*}} lanes %[[L1]] : vector<16xi32> -> vector<16xi1>
// CHECK-NEXT: smla.gather %{{.*}}[%block_id_y] rows(%[[I1]]) mask(%[[M1]] : vector<16xi1>) into %[[KEYS]] {issue_only}
// CHECK-NEXT: }
// CHECK: smla.scatter_dkv {{.*}} rows(%[[IDX]])
// CHECK-NOT: smla.gather
// CHECK: gpu.return

// Barriers: after the wait (the copies become visible to every thread),
// before the next step's issue (the dQ accumulate still reads the tile),
// none right after an issue (its copies land at the wait).
// BAR: scf.for
// BAR: scf.if
// BAR: smla.gather {{.*}} {issue_only}
// BAR-NEXT: }
// BAR-NEXT: smla.gather {{.*}} {wait_only}
// BAR-NEXT: gpu.barrier
// BAR-NEXT: smla.tile_dot
// BAR: smla.dq_accumulate
// BAR: gpu.barrier
// BAR-NEXT: scf.if
// BAR: smla.gather {{.*}} {issue_only}
// BAR-NEXT: }
// BAR-NOT: gpu.barrier
// BAR: smla.scatter_dkv
// BAR-NEXT: gpu.barrier
// BAR-NEXT: }

// Two CTAs per SM: left as it is.
// TWO: smla.ctas_per_sm = 2
// TWO-NOT: issue_only
// TWO-NOT: wait_only
// TWO: smla.gather %{{.*}} mask(%{{[0-9]+}} : vector<16xi1>) into %{{[a-z_0-9]+}} :
// TWO-NOT: issue_only

func.func @small(%q: memref<?x4x96xbf16>, %kv: memref<?x2x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x2x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x2x96xf32>, %dkv: memref<?x2x96xbf16>, %counters: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x2x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x2x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x2x96xf32>) dkv(%dkv : memref<?x2x96xbf16>) counters(%counters : memref<4xi64>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 2, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}
