// RUN: smla-opt --smla-guarded --smla-gpu-map --smla-prefetch-keys %s | FileCheck %s
// RUN: smla-opt --smla-gpu-kernels %s | FileCheck %s --check-prefix=LOWER

// A tokens = 2 configuration maps to the bwd kernel of folded tokens (one
// CTA per token pair, its index pair from rows 2t and 2t + 1) and a
// pair_union kernel that builds those aligned rows.

// CHECK-LABEL: gpu.func @pair_bwd
// CHECK-SAME: smla.grid = ["T", "1", "1"], smla.kind = "bwd"
// CHECK-SAME: "counters", "pair_lengths", "T", "S_kv", "K", "sm_scale", "walk_period"]
// The CTA of pair p walks the blocks below min(K, max(pair_lengths[p], 0)).
// CHECK: %[[LENS:.*]] = memref.reinterpret_cast %arg10
// CHECK: %[[LEN:.*]] = memref.load %[[LENS]][%block_id_x]
// CHECK: %[[LENI:.*]] = arith.index_cast %[[LEN]] : i32 to index
// CHECK: %[[POS:.*]] = arith.maxsi %[[LENI]], %c0
// CHECK: %[[CLAMP:.*]] = arith.minsi %[[POS]],
// CHECK: %[[BLOCKS:.*]] = arith.ceildivui %[[CLAMP]], %c16
// CHECK: %[[TA:[0-9]+]] = arith.muli %block_id_x, %c2{{.*}} : index
// CHECK: %[[TB:[0-9]+]] = arith.addi %[[TA]], %c1{{.*}} : index
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %[[BLOCKS]] step
// CHECK: smla.index_load %{{.*}}[%[[TA]], %block_id_y, %{{.*}}]
// CHECK: smla.index_load %{{.*}}[%[[TB]], %block_id_y, %{{.*}}]
// CHECK: %[[U:indices[_0-9]*]], %[[M:mask[_0-9]*]], %{{.*}} = smla.index_pair
// A pair step re-runs two index loads per issue (ptxas spilled): it keeps
// its whole gather.
// CHECK-NOT: issue_only
// CHECK: smla.gather %{{.*}} rows(%[[U]]) mask(%[[M]] : vector<16xi1>) into
// CHECK-NOT: wait_only
// CHECK: smla.softmax {{.*}} pair_mask
// The op may keep the aligned rows in dq's memory: a CTA barrier between
// the walk's last index read and the dq store.
// CHECK: gpu.barrier
// CHECK-NEXT: smla.store_dq
// CHECK: gpu.return

// The union kernel: grid T (pairs), its parameters (pair_width: the rows'
// slots per token, >= 2K), and its scratch in shared memory (a table of 4 x 2048 keys and slots, 2048 ranks + 2, one
// partial per thread).
// CHECK-LABEL: gpu.func @pair_pair_union
// CHECK-SAME: smla.grid = ["T", "1", "1"], smla.kind = "pair_union", smla.params = ["indices", "pair_rows", "pair_lengths", "T", "S_kv", "K", "pair_width"]
// CHECK: memref.alloca() : memref<8192xi32, #gpu.address_space<workgroup>>
// CHECK: memref.alloca() : memref<8192xi32, #gpu.address_space<workgroup>>
// CHECK: memref.alloca() : memref<2050xi32, #gpu.address_space<workgroup>>
// CHECK: memref.alloca() : memref<256xi32, #gpu.address_space<workgroup>>
// CHECK: smla.pair_union %{{.*}}[%block_id_x] below

// Lowered: claims by compare-and-swap (relaxed, CTA scope: no fence),
// shared marks by atomic or, phases
// separated by barriers, the repeat flag read before the rows are written
// (disjoint or aligned); no smla op is left.
// LOWER-LABEL: gpu.func @pair_pair_union
// LOWER-SAME: smla.dynamic_smem = 74880
// LOWER: gpu.barrier
// LOWER: llvm.inline_asm has_side_effects asm_dialect = att "atom.relaxed.cta.shared.cas.b32 $0, [$1], $2, $3;", "=r,l,r,r"
// LOWER: gpu.barrier
// LOWER: llvm.inline_asm has_side_effects asm_dialect = att "atom.relaxed.cta.shared.cas.b32
// LOWER: memref.atomic_rmw ori
// LOWER: gpu.barrier
// LOWER: %[[FLAG:.*]] = memref.load %{{.*}}[%c2049]
// LOWER: %[[REPEAT:.*]] = arith.cmpi ne, %[[FLAG]], %c0_i32
// LOWER: scf.if %[[REPEAT]] {
// LOWER-NOT: smla.
// LOWER: gpu.return
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
