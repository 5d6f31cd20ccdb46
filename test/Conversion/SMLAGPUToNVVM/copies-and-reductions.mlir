// RUN: smla-opt --pass-pipeline='builtin.module(gpu.module(smla-gpu-to-nvvm))' %s | FileCheck %s

// The producer's index ops become per-thread lanes of its 128 threads
// (threads 0..63 hold one index each); write_slots stores
// select(gather mask && dKV mask, index, -1); gather_keys copies each
// key row in 16-byte cp.async pieces from row select(mask, index, 0) with
// select(mask, 8, 0) source elements, so a masked key reads nothing and
// its tile row is zero-filled. A wgmma over k_extent 128 is eight
// m64n64k16 instructions between a fence and a commit, the first with
// scale-d 0; reduce_dkv adds whole 16-byte pieces of dKV rows with
// red.global.add.v4.f32, each predicated on its slot being >= 0 and its
// address formed from select(slot >= 0, slot, 0).

// CHECK-LABEL: gpu.func @copies
// CHECK: nvvm.setmaxregister decrease 24
// write_slots.
// CHECK: scf.for %[[L:.*]] = %{{.*}} to %c64 step %c128 {
// CHECK: %[[RAW:.*]] = memref.load %arg2
// CHECK: %[[IDX:.*]] = arith.select %{{.*}}, %[[RAW]], %c-1_i32 : i32
// CHECK: memref.store %{{[0-9]+}}, %alloca_0[%[[L]]]
// gather_keys: 16 rows per pass of 128 threads, 8 threads per row.
// CHECK: scf.for %{{.*}} = %{{.*}} to %c64 step %c16 {
// CHECK: %[[ROW:.*]] = arith.select %[[MASK:[0-9]+]], %{{.*}}, %c0_i32 : i32
// CHECK: %[[ROWI:.*]] = arith.index_cast %[[ROW]] : i32 to index
// CHECK: %[[SRC:.*]] = arith.select %[[MASK]], %c8, %c0 : index
// CHECK: nvgpu.device_async_copy %arg0[%[[ROWI]], %arg4, %{{.*}}], %{{.*}}[%{{.*}}], 8, %[[SRC]] {bypassL1}
// CHECK: nvgpu.device_async_copy %arg0[%[[ROWI]], %arg4, %{{.*}}], %{{.*}}[%{{.*}}], 8, %[[SRC]] {bypassL1}
// CHECK-NOT: nvgpu.device_async_copy
// CHECK: nvvm.setmaxregister increase 168
// wgmma.
// CHECK: wgmma.fence.sync.aligned
// CHECK: setp.ne.b32 p, 0, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK-COUNT-7: setp.ne.b32 p, 1, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: wgmma.commit_group.sync.aligned
// CHECK: wgmma.wait_group.sync.aligned 0
// reduce_dkv: 64 columns of 16 rows per warp, two lines per lane (8 red.v4).
// CHECK: %[[POLICY:.*]] = llvm.inline_asm asm_dialect = att "createpolicy.fractional.L2::evict_last.b64 $0, 1.0;"
// CHECK: %[[OK:.*]] = arith.cmpi sge, %[[S:.*]], %c0_i32 : i32
// CHECK: arith.select %[[OK]], %[[S]], %c0_i32 : i32
// CHECK: "@$5 red.global.add.L2::cache_hint.v4.f32 [$0], {$1, $2, $3, $4}, $6;", "l,f,f,f,f,b,l" %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[OK]], %[[POLICY]]
// CHECK-COUNT-7: red.global.add.L2::cache_hint.v4.f32
// CHECK-NOT: red.global
// CHECK-NOT: smla_gpu.
gpu.module @m {
  gpu.func @copies(%kv: memref<?x1x128xbf16>, %dkv: memref<?x1x128xf32>,
                   %indices: memref<?x1x?xi32>, %t: index, %g: index) kernel
      attributes {known_block_size = array<i32: 384, 1, 1>} {
    %keys = memref.alloca() {alignment = 1024 : i64} : memref<64x128xbf16, #gpu.address_space<workgroup>>
    %slots = memref.alloca() {alignment = 16 : i64} : memref<64xi32, #gpu.address_space<workgroup>>
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"] registers [24, 240, 240] {
      %idx = smla.index_load %indices[%t, %g, %c0] : memref<?x1x?xi32> -> vector<64xi32>
      %n = memref.dim %kv, %c0 : memref<?x1x128xbf16>
      %gmask = smla.index_mask %idx below %n lanes %c64 : vector<64xi32> -> vector<64xi1>
      %m = memref.dim %dkv, %c0 : memref<?x1x128xf32>
      %dmask = smla.index_mask %idx below %m lanes %c64 : vector<64xi32> -> vector<64xi1>
      smla_gpu.write_slots %idx masks(%gmask, %dmask : vector<64xi1>, vector<64xi1>) into %slots : vector<64xi32>, memref<64xi32, #gpu.address_space<workgroup>>
      smla_gpu.gather_keys %kv[%idx] group(%g) mask(%gmask : vector<64xi1>) into %keys : memref<?x1x128xbf16>, vector<64xi32>, memref<64x128xbf16, #gpu.address_space<workgroup>>
    }, {
      %s = smla_gpu.wgmma a_tile(%keys : memref<64x128xbf16, #gpu.address_space<workgroup>>) b_tile(%keys : memref<64x128xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 128 : i64, a_major = "k", b_major = "k", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 0 : i64} -> vector<32xf32>
      %s1 = smla_gpu.wgmma_wait 0, %s : vector<32xf32>
      %r = smla_gpu.fragment_rows %slots {n = 64 : i64} : memref<64xi32, #gpu.address_space<workgroup>> -> vector<32xi32>
      smla_gpu.reduce_dkv %s1 slots(%r : vector<32xi32>) into %dkv[%g] {col = 64 : i64} : vector<32xf32>, memref<?x1x128xf32>
    }, {
      %t2 = smla_gpu.thread_in_warpgroup : index
    }
    gpu.return
  }
}
