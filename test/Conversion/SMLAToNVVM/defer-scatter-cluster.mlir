// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true cluster-head-blocks=true" --smla-defer-scatter --smla-verify-guards %s | FileCheck %s
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true cluster-head-blocks=true" --smla-defer-scatter --smla-allocate-smem --smla-verify-smem --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=LOWER

// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter %s | FileCheck %s --check-prefix=OFF
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true cluster-head-blocks=true" --smla-defer-scatter="fuse-epilogue=true" --smla-verify-guards --smla-allocate-smem --smla-verify-smem --smla-insert-barriers --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=FUSED
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true cluster-head-blocks=true" --smla-defer-scatter="fuse-epilogue=true overlap-chunks=2" --smla-verify-guards --smla-allocate-smem --smla-insert-barriers %s | FileCheck %s --check-prefix=OV2
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true cluster-head-blocks=true" --smla-defer-scatter="fuse-epilogue=true overlap-chunks=2" --smla-allocate-smem --smla-verify-smem --smla-insert-barriers --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=OV2LOW
// RUN: not smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true cluster-head-blocks=true" --smla-defer-scatter="fuse-epilogue=true overlap-chunks=3" %s 2>&1 | FileCheck %s --check-prefix=OV3

// With fuse-epilogue (fused-epilogue.mlir; the library keeps it off for
// the clusters, whose kernels then spill): warpgroup 0 sends its 16
// packed pairs to the partner right after storing them, thread 0 arms
// the mbarrier, and every thread advances its pack count after the
// branch, before the barrier.
// FUSED-LABEL: gpu.func @b1_bwd
// FUSED: math.exp2
// FUSED-COUNT-16: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
// FUSED-NOT: st.async
// FUSED: mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192
// FUSED: "fence.proxy.async.shared::cta;"
// FUSED-NEXT: }
// FUSED: memref.store %{{.*}}, %alloca[] : memref<i32>
// FUSED-NEXT: gpu.barrier

// B1's shape (64 heads in two head blocks of 32, D 512 + 64, block 64, 512
// threads) with the wgmma scatter and cluster-head-blocks (the key
// cluster=1): the token's two head blocks run as a
// cluster of two CTAs that split the dKV columns. Each stages, next to its
// own [q; do] tile, the partner's q and do rows for its column half (a
// canonical 64 x 288 tile); pack_dkv also sends its packed dS^T and P^T to
// the partner (two block buffers, two mbarriers, a per-thread count), and
// every scatter_packed chunk reads both.

// CHECK-LABEL: gpu.func @b1_bwd
// CHECK-SAME: nvvm.cluster_dim = array<i32: 1, 2, 1>
// CHECK: %[[PARTNER:.*]] = memref.alloca() : memref<4x64x32xbf16, #gpu.address_space<workgroup>>
// CHECK-NEXT: %[[BARS:.*]] = memref.alloca() : memref<2xi64, #gpu.address_space<workgroup>>
// CHECK-NEXT: %[[COUNT:.*]] = memref.alloca() : memref<i32>
// CHECK: memref.store %{{.*}}, %[[COUNT]][] : memref<i32>
// The mbarriers are initialised before a cluster barrier, ahead of
// everything else: no partner's st.async can reach them first.
// CHECK: smla.cluster_init %[[BARS]] : memref<2xi64, #gpu.address_space<workgroup>>
// Both head blocks rotate their block walk as the pair's even one, so
// that they walk the same slots in the same order.
// CHECK: %[[EVEN:.*]] = arith.andi %block_id_y, %c-2 : index
// CHECK-NEXT: %[[ROW:.*]] = arith.muli %[[EVEN]],
// CHECK-NEXT: arith.addi %block_id_x, %[[ROW]] {smla.walk_cta} : index
// CHECK: %[[ROWS:.*]] = memref.alloca() {smla.partner_rows} : memref<64x288xbf16, #gpu.address_space<workgroup>>
// The partner's rows (head block g ^ 1) for this CTA's half of the columns
// ((g & 1) * 288), do zero past its 512 columns, in the same copy group.
// CHECK: arith.xori %{{.*}}, %c1
// CHECK: arith.andi %{{.*}}, %c1
// CHECK: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_wait
// CHECK: scf.for
// CHECK: smla.scatter_packed {{.*}} cluster(%[[ROWS]], %[[PARTNER]], %[[BARS]], %[[COUNT]] : {{.*}}) {chunk = 0 : i64, chunks = 3 : i64}
// CHECK: smla.scatter_packed {{.*}} cluster(%[[ROWS]], %[[PARTNER]], %[[BARS]], %[[COUNT]] : {{.*}}) {chunk = 1 : i64, chunks = 3 : i64}
// CHECK: smla.scatter_packed {{.*}} cluster(%[[ROWS]], %[[PARTNER]], %[[BARS]], %[[COUNT]] : {{.*}}) {chunk = 2 : i64, chunks = 3 : i64}
// CHECK: smla.pack_dkv {{.*}} cluster(%[[PARTNER]], %[[BARS]], %[[COUNT]] : {{.*}})
// CHECK: }
// CHECK-NEXT: smla.scatter_packed {{.*}} cluster({{.*}}) {chunk = 0 : i64, chunks = 3 : i64}
// CHECK-NEXT: smla.scatter_packed {{.*}} cluster({{.*}}) {chunk = 1 : i64, chunks = 3 : i64}
// CHECK-NEXT: smla.scatter_packed {{.*}} cluster({{.*}}) {chunk = 2 : i64, chunks = 3 : i64}

// Without cluster-head-blocks: no partner rows, no cluster, the walk's
// CTA index as it was.
// OFF-LABEL: gpu.func @b1_bwd
// OFF-NOT: nvvm.cluster_dim
// OFF-NOT: smla.partner_rows
// OFF-NOT: cluster(
// OFF: arith.addi %block_id_x, %{{.*}} {smla.walk_cta} : index
// OFF-NOT: cluster(
// OFF: gpu.return

// Lowered: chunk 0 waits (unless no block has been packed yet) for the
// partner's tiles of the previous block, then fences the async proxy; a
// chunk is 8 m64n24k16 (own and partner rows), and per slot one red.v4
// (n8 tiles 0-1) and one red.v2 (tile 2), predicated by slot >= 0; the
// pack sends its 4 pairs per thread with st.async and thread 0 arms its
// own mbarrier for the partner's 8 KB.
// LOWER-LABEL: gpu.func @b1_bwd
// LOWER-SAME: smla.dynamic_smem = 227328
// LOWER: llvm.inline_asm {{.*}}setp.lt.u32 p, $1, 2;{{.*}}mbarrier.init.shared::cta.b64 [a], 1;{{.*}}fence.mbarrier_init.release.cluster;{{.*}}barrier.cluster.arrive.release.aligned;{{.*}}barrier.cluster.wait.acquire.aligned;
// LOWER: llvm.inline_asm {{.*}}setp.eq.u32 q, $2, 0;{{.*}}@q bra done;{{.*}}mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;
// LOWER-NEXT: llvm.inline_asm {{.*}}"fence.proxy.async.shared::cta;"
// LOWER-COUNT-8: wgmma.mma_async.sync.aligned.m64n24k16
// LOWER: @$5 red.global.add.v4.f32
// LOWER: @$5 red.global.add.v4.f32
// LOWER: @$3 red.global.add.v2.f32
// LOWER: @$3 red.global.add.v2.f32
// LOWER-COUNT-4: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [a], $3, [m];
// LOWER: @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192;
func.func @b1(%q: memref<?x64x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x64x512xbf16>, %dout: memref<?x64x512xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x64xf32>, %dq: memref<?x64x576xbf16>, %dkv_accum: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %counters: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x64x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x64x512xbf16>) dout(%dout : memref<?x64x512xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x64xf32>) dq(%dq : memref<?x64x576xbf16>) dkv_accum(%dkv_accum : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) counters(%counters : memref<4xi64>) {config = #smla.config<d = 512, dt = 64, heads = 64, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, headBlocks = 2, tokens = 1>, sm_scale = 0.0416 : f32}
  return
}

// H = 128 (DeepSeek-V3.2's heads): four head blocks of 32 per token (grid
// y = 4 g + hb); head blocks hb and hb ^ 1 run as a cluster of two, each
// rotating its walk as the pair's even one, with the same partner rows.
// CHECK-LABEL: gpu.func @h128_bwd
// CHECK-SAME: nvvm.cluster_dim = array<i32: 1, 2, 1>
// CHECK: %[[PARTNER4:.*]] = memref.alloca() : memref<4x64x32xbf16, #gpu.address_space<workgroup>>
// CHECK: %[[EVEN4:.*]] = arith.andi %block_id_y, %c-2 : index
// CHECK-NEXT: %[[ROW4:.*]] = arith.muli %[[EVEN4]],
// CHECK-NEXT: arith.addi %block_id_x, %[[ROW4]] {smla.walk_cta} : index
// CHECK: %[[ROWS4:.*]] = memref.alloca() {smla.partner_rows} : memref<64x288xbf16, #gpu.address_space<workgroup>>
// CHECK: smla.scatter_packed {{.*}} cluster(%[[ROWS4]], %[[PARTNER4]], {{.*}}) {chunk = 0 : i64, chunks = 3 : i64}
// CHECK: smla.pack_dkv {{.*}} cluster(%[[PARTNER4]], {{.*}})
// LOWER-LABEL: gpu.func @h128_bwd
// LOWER-SAME: smla.dynamic_smem = 227328
// LOWER: mbarrier.try_wait.parity.shared::cta.b64
// LOWER: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
func.func @h128(%q: memref<?x128x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x128x512xbf16>, %dout: memref<?x128x512xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x128xf32>, %dq: memref<?x128x576xbf16>, %dkv_accum: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %counters: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x128x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x128x512xbf16>) dout(%dout : memref<?x128x512xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x128xf32>) dq(%dq : memref<?x128x576xbf16>) dkv_accum(%dkv_accum : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) counters(%counters : memref<4xi64>) {config = #smla.config<d = 512, dt = 64, heads = 128, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, headBlocks = 4, tokens = 1>, sm_scale = 0.0416 : f32}
  return
}

// overlap-chunks=2: chunks 1 and 2 both right before the products,
// marked, after the barrier that closes the gather's phase; no barrier
// between them or before the run (one op for smla-insert-barriers).
// OV2-LABEL: gpu.func @b1_bwd
// OV2-SAME: smla.overlap_run = 2 : i64
// OV2: scf.for
// OV2: smla.scatter_packed {{.*}} {chunk = 0 : i64, chunks = 3 : i64}
// OV2-NEXT: smla.gather
// OV2: gpu.barrier
// OV2-NEXT: smla.scatter_packed {{.*}} {chunk = 1 : i64, chunks = 3 : i64, smla.overlap_run = 2 : i64}
// OV2-NEXT: smla.scatter_packed {{.*}} {chunk = 2 : i64, chunks = 3 : i64, smla.overlap_run = 1 : i64}
// OV2-NEXT: smla.tile_dot {{.*}} {smla.fused_epilogue}
// OV2: smla.pack_dkv
// OV2-NEXT: gpu.barrier
// OV2-NEXT: smla.dq_packed
// After the barrier, both chunks under thread >= 128: the first without
// an arrive, the second with its one arrive after its wgmma wait and
// before its reductions; then warpgroup 0's sync.
// OV2LOW-LABEL: gpu.func @b1_bwd
// OV2LOW: scf.for %{{.*}} = %c0{{.*}} to %{{[0-9]+}} step %c1
// OV2LOW: gpu.barrier
// OV2LOW-NEXT: arith.constant 128 : index
// OV2LOW-NEXT: arith.cmpi uge, %thread_id_x
// OV2LOW-NOT: bar.arrive
// OV2LOW: "wgmma.wait_group.sync.aligned 0;"
// OV2LOW-NOT: bar.arrive
// OV2LOW: red.global.add.v4.f32
// OV2LOW-NOT: bar.arrive
// OV2LOW: arith.cmpi uge, %thread_id_x, %c128
// OV2LOW-NOT: bar.arrive
// OV2LOW: "wgmma.wait_group.sync.aligned 0;"
// OV2LOW-NOT: red.global
// OV2LOW: "bar.arrive 1, 512;"
// OV2LOW-NOT: bar.arrive
// OV2LOW: red.global.add.v4.f32
// OV2LOW-NOT: bar.arrive
// OV2LOW: "bar.sync 1, 512;"
// OV2LOW-NOT: bar.arrive
// OV2LOW-LABEL: gpu.func @b1_dkv_zero
// The same for H = 128's pairs of head blocks.
// OV2LOW-LABEL: gpu.func @h128_bwd
// OV2LOW-COUNT-1: "bar.arrive 1, 512;"
// OV2LOW-NOT: "bar.arrive 1, 512;"
// OV2LOW: "bar.sync 1, 512;"
// OV2LOW-LABEL: gpu.func @h128_dkv_zero
// The pass takes 0, 1 or 2, with fuse-epilogue.
// OV3: overlap-chunks must be 0, 1 or 2, and needs fuse-epilogue (got 3)
