// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter="fuse-epilogue=true" --smla-verify-guards %s | FileCheck %s
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter="fuse-epilogue=true" --smla-allocate-smem --smla-insert-barriers %s | FileCheck %s --check-prefix=BARRIERS
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter="fuse-epilogue=true" --smla-allocate-smem --smla-verify-smem --smla-insert-barriers --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=LOWER
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter="fuse-epilogue=true" --smla-allocate-smem --smla-verify-smem --smla-insert-barriers --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=NOTILE
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter --smla-allocate-smem --smla-verify-smem --smla-insert-barriers --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=TILE
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter="fuse-epilogue=true" --smla-allocate-smem %s | FileCheck %s --check-prefix=SMEM
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter="fuse-epilogue=true overlap-chunks=1" --smla-allocate-smem --smla-insert-barriers %s | FileCheck %s --check-prefix=OVBAR
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter="fuse-epilogue=true overlap-chunks=1" --smla-allocate-smem --smla-verify-smem --smla-insert-barriers --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=OVLOW
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter --smla-allocate-smem %s | FileCheck %s --check-prefix=SMEM-CTA

// The token-pair kernel of defer-scatter.mlir with smla-defer-scatter's
// fuse-epilogue (the configuration key epilogue=fused): softmax, dscores
// and pack_dkv run in the block products' warpgroup, on its wgmma
// accumulators (LowerEpilogueWgmma.cpp).

// The step: chunk 2 moves above the products with the pack's index masks,
// the pack right after dscores; the five ops carry the mark, and
// smla-verify-guards still checks each of them.
// CHECK-LABEL: gpu.func @pair_bwd
// CHECK: scf.for
// CHECK: smla.scatter_packed {{.*}} {chunk = 0 : i64, chunks = 3 : i64}
// CHECK-NEXT: smla.gather
// CHECK-NEXT: smla.scatter_packed {{.*}} {chunk = 1 : i64, chunks = 3 : i64}
// CHECK-NEXT: smla.scatter_packed {{.*}} {chunk = 2 : i64, chunks = 3 : i64}
// CHECK: smla.index_pair
// CHECK: smla.tile_dot {{.*}} {smla.fused_epilogue}
// CHECK-NEXT: smla.tile_dot {{.*}} {smla.fused_epilogue}
// CHECK-NEXT: smla.softmax {{.*}}smla.fused_epilogue
// CHECK-NEXT: smla.dscores {{.*}}smla.fused_epilogue
// CHECK-NEXT: smla.pack_dkv {{.*}} {smla.fused_epilogue}
// CHECK-NEXT: smla.dq_packed
// CHECK-NEXT: }

// smla-insert-barriers sees the run as one op at the products: a barrier
// before it (the pack overwrites what the chunks read), none inside it,
// one before dq_packed (which reads the packed tiles), one at the end of
// the step (the next gather overwrites the keys dq_packed reads).
// BARRIERS-LABEL: gpu.func @pair_bwd
// BARRIERS: smla.scatter_packed {{.*}} {chunk = 2 : i64, chunks = 3 : i64}
// BARRIERS-NOT: gpu.barrier
// BARRIERS: smla.index_pair
// BARRIERS-NEXT: gpu.barrier
// BARRIERS-NEXT: smla.tile_dot
// BARRIERS-NEXT: smla.tile_dot
// BARRIERS-NEXT: smla.softmax
// BARRIERS-NEXT: smla.dscores
// BARRIERS-NEXT: smla.pack_dkv
// BARRIERS-NEXT: gpu.barrier
// BARRIERS-NEXT: smla.dq_packed
// BARRIERS-NEXT: gpu.barrier
// BARRIERS-NEXT: }

// Lowered: in warpgroup 0, the thread's 8 rows' lse loads before the
// wgmma chain; after its wait the rows' delta from shared memory, then
// per element the guarded exp2 and dS, and per (row pair, key) the bf16
// pairs of dS^T and P^T straight into the packed tiles (16 exp2, 16
// 32-bit shared stores); the 16 clamp flags summed into one guarded
// atomic add of counter 2; the async-proxy fence. The slots are written
// by warpgroup 1 (thread - 128 < 64) after the branch, before the barrier.
// LOWER-LABEL: gpu.func @pair_bwd
// LOWER: scf.for %{{.*}} = %c0{{.*}} to %{{.*}} step %c1
// LOWER: gpu.barrier
// LOWER: scf.if
// LOWER-COUNT-8: memref.load %{{.*}}[%block_id_x, %{{.*}}] : memref<?x32xf32>
// LOWER: wgmma.fence.sync.aligned
// LOWER: wgmma.wait_group.sync.aligned 0;
// LOWER-COUNT-8: memref.load %{{.*}}[%{{.*}}] : memref<32xf32, #gpu.address_space<workgroup>>
// LOWER-COUNT-16: math.exp2
// LOWER-NOT: math.exp2
// LOWER-NOT: memref.atomic_rmw
// LOWER: memref.atomic_rmw addi %{{.*}}, %{{.*}}[%c2{{.*}}] : (i64, memref<4xi64>) -> i64
// LOWER-NOT: memref.atomic_rmw
// LOWER: "fence.proxy.async.shared::cta;"
// LOWER: %[[SLOT:.*]] = arith.subi %thread_id_x, %c128
// LOWER: memref.store %{{.*}}, %{{.*}}[%[[SLOT]]] : memref<64xi32, #gpu.address_space<workgroup>>
// LOWER-NEXT: }
// LOWER-NEXT: gpu.barrier

// The stores go to the packed tiles, K-major canonical [64 slots][32
// rows]: none into the f32 S and dP tiles, which the products of the
// unfused form (TILE, the same pattern) fill.
// NOTILE-LABEL: gpu.func @pair_bwd
// NOTILE-NOT: memref<32x68xf32
// NOTILE-NOT: memref.store %{{.*}} : memref<32x64xf32
// NOTILE: gpu.return
// TILE-LABEL: gpu.func @pair_bwd
// TILE: memref.store %{{.*}} : memref<32x64xf32
// TILE: gpu.return

func.func @pair(%q: memref<?x32x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x32x512xbf16>, %dout: memref<?x32x512xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x32xf32>, %dq: memref<?x32x576xbf16>, %dkv_accum: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %counters: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x32x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x32x512xbf16>) dout(%dout : memref<?x32x512xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x32xf32>) dq(%dq : memref<?x32x576xbf16>) dkv_accum(%dkv_accum : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) counters(%counters : memref<4xi64>) {config = #smla.config<d = 512, dt = 64, heads = 32, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, headBlocks = 1, tokens = 2>, sm_scale = 0.0416 : f32}
  return
}

// Nothing touches the f32 S and dP tiles any more: smla-defer-scatter
// marks their allocas, smla-allocate-smem gives them no bytes (2 x 32 x
// 68 x 4 = 17,408 fewer than the CTA-wide form's), and the lowering
// erases them.
// SMEM-LABEL: gpu.func @pair_bwd
// SMEM-SAME: smla.dynamic_smem = 156672
// SMEM-COUNT-2: memref.alloca() {smla.fused_epilogue} : memref<32x68xf32, #gpu.address_space<workgroup>>
// SMEM-CTA-LABEL: gpu.func @pair_bwd
// SMEM-CTA-SAME: smla.dynamic_smem = 174080

// With overlap-chunks=1 (epilogue=overlap) chunk 2 sits right before the
// products, marked smla.overlap_run = 1 (its place before the run), and
// smla-insert-barriers sees chunk and run as one op: the barrier moves
// from between them to before the chunk (the run's pack overwrites what
// chunks 1 and 2 read), still three a step. The kernel carries the mark
// too, its value the number of such chunks (smla-compile checks it).
// OVBAR-LABEL: gpu.func @pair_bwd
// OVBAR-SAME: smla.overlap_run = 1 : i64
// OVBAR: smla.scatter_packed {{.*}} {chunk = 1 : i64, chunks = 3 : i64}
// OVBAR-NOT: smla.scatter_packed
// OVBAR: gpu.barrier
// OVBAR-NEXT: smla.scatter_packed {{.*}} {chunk = 2 : i64, chunks = 3 : i64, smla.overlap_run = 1 : i64}
// OVBAR-NEXT: smla.tile_dot {{.*}} {smla.fused_epilogue}
// OVBAR-NEXT: smla.tile_dot
// OVBAR-NEXT: smla.softmax
// OVBAR-NEXT: smla.dscores
// OVBAR-NEXT: smla.pack_dkv
// OVBAR-NEXT: gpu.barrier
// OVBAR-NEXT: smla.dq_packed
// OVBAR-NEXT: gpu.barrier
// OVBAR-NEXT: }

// Lowered: warpgroups 1-3 (thread >= 128) run the chunk as three
// m64n64k16 pieces, load their slots after the wgmma wait, arrive at
// named barrier 1 and then issue the reductions; warpgroup 0 computes the
// 16 P and dS pairs, waits at barrier 1 (all 512 threads), then stores
// them, writes the slots (threads < 64) and fences. Warpgroup 1 does not
// write the slots after the branch (it does in the fused form without the
// overlap).
// OVLOW-LABEL: gpu.func @pair_bwd
// OVLOW: scf.for %{{.*}} = %c0{{.*}} to %{{.*}} step %c1
// OVLOW: gpu.barrier
// OVLOW: arith.cmpi uge, %thread_id_x, %c128
// OVLOW-NEXT: scf.if
// OVLOW-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// OVLOW: wgmma.wait_group.sync.aligned 0;
// OVLOW-COUNT-2: memref.load %{{.*}} : memref<64xi32, #gpu.address_space<workgroup>>
// OVLOW-NOT: red.global
// OVLOW: "bar.arrive 1, 512;"
// OVLOW: red.global.add.v4.f32
// OVLOW: wgmma.wait_group.sync.aligned 0;
// OVLOW-COUNT-16: math.exp2
// OVLOW-NOT: llvm.store {{.*}} !llvm.ptr<3>
// OVLOW: "bar.sync 1, 512;"
// OVLOW-COUNT-16: llvm.store {{.*}} : i32, !llvm.ptr<3>
// OVLOW: memref.store %{{.*}}, %{{.*}}[%thread_id_x] : memref<64xi32, #gpu.address_space<workgroup>>
// OVLOW: "fence.proxy.async.shared::cta;"
// OVLOW-NOT: arith.subi %thread_id_x, %c128
// OVLOW: gpu.barrier
