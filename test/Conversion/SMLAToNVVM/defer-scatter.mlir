// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter --smla-verify-guards %s | FileCheck %s
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512" --smla-defer-scatter %s | FileCheck %s --check-prefix=MMA
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter --smla-allocate-smem --smla-verify-smem --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=LOWER
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter --smla-allocate-smem --smla-verify-smem --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=PRODUCTS
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter --smla-allocate-smem --smla-verify-smem --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=DQ
// RUN: not smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-allocate-smem --smla-lower-to-nvvm %s 2>&1 | FileCheck %s --check-prefix=UNSPLIT
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512 wgmma-scatter=true" --smla-defer-scatter --smla-allocate-smem --smla-lower-to-nvvm %s | FileCheck %s --check-prefix=SOFTMAX

// The token-pair kernel of GLM-5.2's shape (two tokens of 16 heads, D 512
// + 64, block 64, 512 threads) with the wgmma scatter: q and do staged as
// one canonical [q; do] tile, the scatter split into pack_dkv where it was
// and three scatter_packed chunks of 192 columns spread over the next step
// (before the key gather, before the block products, before the dQ
// accumulate), the last block's chunks after the loop. The block's dQ then
// runs on the packed dS (dq_packed, after the pack) and the key tile is an
// unpadded, 1 KB aligned buffer in wgmma's 128-byte swizzle.

// CHECK-LABEL: gpu.func @pair_bwd
// CHECK: %[[PACKED:.*]] = memref.alloca() : memref<2x64x32xbf16, #gpu.address_space<workgroup>>
// CHECK: %[[SLOTS:.*]] = memref.alloca() : memref<64xi32, #gpu.address_space<workgroup>>
// CHECK: %[[KEYBUF:.*]] = memref.alloca() {alignment = 1024 : i64} : memref<64x576xbf16, #gpu.address_space<workgroup>>
// CHECK-NEXT: %[[KEYS:.*]] = memref.reinterpret_cast %[[KEYBUF]] to offset: [0], sizes: [64, 576], strides: [576, 1] {smla.swizzled_keys}
// CHECK: %[[ACC:.*]] = memref.alloca() {smla.dq_registers = 5 : i64} : memref<32x580xf32, #gpu.address_space<workgroup>>
// CHECK-NEXT: %[[ACCV:.*]] = memref.subview %[[ACC]]
// CHECK: %[[Q:.*]] = memref.reinterpret_cast %{{.*}} {smla.canonical_row = 0 : i64}
// CHECK: %[[DO:.*]] = memref.reinterpret_cast %{{.*}} {smla.canonical_row = 32 : i64}
// Before the loop no slot is valid: the first step's chunks add nothing.
// CHECK: linalg.fill ins(%c-1_i32 : i32) outs(%[[SLOTS]] : memref<64xi32, #gpu.address_space<workgroup>>)
// CHECK-NEXT: scf.for
// CHECK: smla.scatter_packed %[[PACKED]], %[[SLOTS]], %[[Q]], %[[DO]][%{{.*}}, %{{.*}}] into %{{.*}}[%block_id_y] {chunk = 0 : i64, chunks = 3 : i64}
// CHECK-NEXT: smla.gather {{.*}} into %[[KEYS]]
// CHECK-NEXT: smla.scatter_packed %[[PACKED]], %[[SLOTS]], {{.*}} {chunk = 1 : i64, chunks = 3 : i64}
// CHECK-NEXT: smla.tile_dot %{{.*}}, %[[KEYS]] into
// CHECK-NEXT: smla.tile_dot %{{.*}}, %[[KEYS]] into
// CHECK: smla.dscores
// CHECK-NEXT: smla.scatter_packed %[[PACKED]], %[[SLOTS]], {{.*}} {chunk = 2 : i64, chunks = 3 : i64}
// CHECK-NOT: smla.dq_accumulate
// The pack takes the scatter's own index pair and mask (dkv-bounded).
// CHECK: %[[IDX:indices[_0-9]*]], %[[MASK:mask[_0-9]*]], %{{.*}} = smla.index_pair
// CHECK: smla.pack_dkv %{{.*}}, %{{.*}} rows(%[[IDX]]) mask(%[[MASK]] : vector<64xi1>) into %[[PACKED]], %[[SLOTS]]
// CHECK-NEXT: smla.dq_packed %[[PACKED]], %[[KEYS]] into %[[ACCV]]
// CHECK-NEXT: }
// CHECK-NEXT: smla.scatter_packed {{.*}} {chunk = 0 : i64, chunks = 3 : i64}
// CHECK-NEXT: smla.scatter_packed {{.*}} {chunk = 1 : i64, chunks = 3 : i64}
// CHECK-NEXT: smla.scatter_packed {{.*}} {chunk = 2 : i64, chunks = 3 : i64}
// The pair kernel's barrier before its dq store (rows in dq's memory)
// stays after the last block's chunks.
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: smla.store_dq
// CHECK-NOT: smla.scatter_dkv
// CHECK-NOT: smla.dq_accumulate

// Without wgmma-scatter the rows are staged row-major and the scatter stays.
// MMA-LABEL: gpu.func @pair_bwd
// MMA-NOT: smla.canonical_row
// MMA-NOT: smla.pack_dkv
// MMA-NOT: smla.swizzled_keys
// MMA: smla.dq_accumulate
// MMA: smla.scatter_dkv
// MMA-NOT: smla.scatter_packed
// MMA: gpu.return

// Lowered: the pack writes bf16 pairs, slot j = select(mask, index, -1)
// and fences the async proxy; a chunk is one wgmma chain (the first with
// scale-d false, the accumulators' first definition), commit, wait, then
// per pair of n8 tiles four shfl.xor 1 and two red.v4 predicated by
// slot >= 0.
// LOWER-LABEL: gpu.func @pair_bwd
// LOWER-SAME: smla.dynamic_smem = 174080
// LOWER: scf.for
// LOWER: "mov.b64 $0, $1;"
// LOWER: "wgmma.fence.sync.aligned;"
// LOWER: setp.ne.b32 p, 0, 0;\0Awgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16
// LOWER-COUNT-3: setp.ne.b32 p, 1, 0;\0Awgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16
// LOWER: "wgmma.commit_group.sync.aligned;"
// LOWER-NEXT: "wgmma.wait_group.sync.aligned 0;"
// LOWER: %[[S0:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<64xi32, #gpu.address_space<workgroup>>
// LOWER: %[[S1:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<64xi32, #gpu.address_space<workgroup>>
// LOWER: %[[V0:.*]] = arith.cmpi sge, %[[S0]], %c0_i32{{.*}} : i32
// LOWER: %[[V1:.*]] = arith.cmpi sge, %[[S1]], %c0_i32{{.*}} : i32
// LOWER-COUNT-4: gpu.shuffle  xor
// LOWER: "@$5 red.global.add.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,b" {{.*}}, %[[V0]] :
// LOWER: "@$5 red.global.add.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,b" {{.*}}, %[[V1]] :
// LOWER: %[[NONE:.*]] = arith.constant -1 : i32
// LOWER: arith.select %{{.*}}, %{{.*}}, %[[NONE]] : i32
// LOWER: "fence.proxy.async.shared::cta;"
// LOWER-NOT: smla.
// LOWER: gpu.return

// The block products on the same tile (LowerTileDotWgmma.cpp), with the
// key tile swizzled: in warpgroup 0 (warps < 4), one fence, 32 wgmma
// m64n64k16 over [q; do] and 4 m64n32k16 for the rope tail of q, both
// operands by descriptor (A: the keys, K-major, 128-byte swizzle: layout 1
// in bits 62-63, SBO 1024, LBO 16), the first with scale-d false, one
// commit, wait 0; no ldmatrix.
// PRODUCTS-LABEL: gpu.func @pair_bwd
// PRODUCTS: %[[WG0:.*]] = arith.cmpi ult, %{{.*}}, %c4{{.*}} : index
// PRODUCTS-NEXT: scf.if %[[WG0]] {
// PRODUCTS-NOT: nvvm.ldmatrix
// PRODUCTS: %[[SW:.*]] = arith.constant 4611686293305360384 : i64
// PRODUCTS-NEXT: %[[DESCA:.*]] = arith.ori %{{.*}}, %[[SW]] : i64
// PRODUCTS-NEXT: "wgmma.fence.sync.aligned;"
// PRODUCTS-NEXT: setp.ne.b32 p, 0, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, $32, $33, p, 1, 1, 0, 0;{{.*}} %[[DESCA]], %{{.*}} : (i64, i64)
// PRODUCTS-NOT: wgmma.commit_group
// PRODUCTS-COUNT-31: setp.ne.b32 p, 1, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16
// PRODUCTS-NOT: wgmma.commit_group
// PRODUCTS-COUNT-4: setp.ne.b32 p, 1, 0;\0Awgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {{.*}}, $16, $17, p, 1, 1, 0, 0;
// PRODUCTS-NEXT: llvm.extractvalue
// PRODUCTS: "wgmma.commit_group.sync.aligned;"
// PRODUCTS-NEXT: "wgmma.wait_group.sync.aligned 0;"
// PRODUCTS-COUNT-32: memref.store {{.*}} : memref<32x64xf32, strided<[68, 1]>, #gpu.address_space<workgroup>>
// PRODUCTS: gpu.return

// Softmax per thread (32 rows x 64 keys on 512 threads: 4 passes): thread
// t takes key t % 64 of rows t / 64 + {0, 8, 16, 24}. Its rows' lse (and
// liveness) loads come first, then its key's index lane once, then the 4
// guarded exp2 in straight-line code, reading the S tile at the same
// (row, key) as the CTA loop would.
// SOFTMAX-LABEL: gpu.func @pair_bwd
// SOFTMAX: %[[J:[0-9]+]] = arith.remui %thread_id_x, %c64{{.*}} : index
// SOFTMAX: %[[H0:[0-9]+]] = arith.divui %thread_id_x, %c64{{.*}} : index
// SOFTMAX: %[[R0:[0-9]+]] = arith.addi %[[H0]], %c0{{.*}} : index
// SOFTMAX-COUNT-8: memref.load %reinterpret_cast_{{[0-9]+}}[%block_id_x, %{{[0-9]+}}] : memref<?x32xf32>
// SOFTMAX-NOT: math.exp2
// SOFTMAX: memref.load %{{.*}} : memref<?x1x?xi32>
// SOFTMAX-NOT: scf.for
// SOFTMAX: memref.load %subview[%[[R0]], %[[J]]] : memref<32x64xf32, strided<[68, 1]>, #gpu.address_space<workgroup>>
// SOFTMAX-NOT: scf.for
// SOFTMAX: math.exp2
// SOFTMAX-NOT: scf.for
// SOFTMAX: math.exp2
// SOFTMAX-NOT: scf.for
// SOFTMAX: math.exp2
// SOFTMAX-NOT: scf.for
// SOFTMAX: math.exp2
// SOFTMAX-NOT: math.exp2
// SOFTMAX: gpu.return

// The gather into the swizzled tile: chunk k of a row at 16 (k ^ (r % 8))
// bytes of its 128-byte line, 9 slabs; the wait, then the async-proxy
// fence for the wgmma readers. dq_packed: after the pack's fence and a
// barrier, in every warpgroup one fence, 2 tiles x 4 k steps of m64n32k16
// (A: the key slab MN-major, swizzled, LBO 8192, SBO 1024: flags 1, 1),
// accumulating (scale-d 1: the accumulators carry over blocks), 4 k steps
// of m64n8k16 for its 8 rows of the last tile, one commit, wait 0.
// DQ-LABEL: gpu.func @pair_bwd
// DQ: scf.for
// DQ: arith.xori %{{.*}}, %{{.*}} : index
// DQ: scf.for %{{.*}} = %c0{{.*}} to %c9{{.*}} step %c1
// DQ: nvgpu.device_async_copy {{.*}}, 8, %{{.*}} {bypassL1} : memref<?x1x576xbf16> to memref<36864xbf16, strided<[1]>, #gpu.address_space<workgroup>>
// DQ: nvgpu.device_async_wait
// DQ-NEXT: "fence.proxy.async.shared::cta;"
// DQ: "fence.proxy.async.shared::cta;"
// DQ-NEXT: gpu.barrier
// DQ: "wgmma.fence.sync.aligned;"
// DQ: arith.constant 4611686293338849280 : i64
// DQ-COUNT-8: setp.ne.b32 p, 1, 0;\0Awgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {{.*}}, $16, $17, p, 1, 1, 1, 1;
// DQ-COUNT-4: setp.ne.b32 p, 1, 0;\0Awgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {{.*}}, $4, $5, p, 1, 1, 1, 1;
// DQ-NEXT: llvm.extractvalue
// DQ: "wgmma.commit_group.sync.aligned;"
// DQ-NEXT: "wgmma.wait_group.sync.aligned 0;"
// DQ-NOT: nvvm.mma.sync
// DQ: gpu.barrier
// DQ: gpu.return

// Without smla-defer-scatter the staged canonical tile has no lowering.
// UNSPLIT: error: 'smla.scatter_dkv' op reads the canonical [q; do] tile: only its wgmma form
func.func @pair(%q: memref<?x32x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x32x512xbf16>, %dout: memref<?x32x512xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x32xf32>, %dq: memref<?x32x576xbf16>, %dkv_accum: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %counters: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x32x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x32x512xbf16>) dout(%dout : memref<?x32x512xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x32xf32>) dq(%dq : memref<?x32x576xbf16>) dkv_accum(%dkv_accum : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) counters(%counters : memref<4xi64>) {config = #smla.config<d = 512, dt = 64, heads = 32, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, headBlocks = 1, tokens = 2>, sm_scale = 0.0416 : f32}
  return
}
