// RUN: smla-opt --pass-pipeline='builtin.module(gpu.module(smla-gpu-to-nvvm))' %s | FileCheck %s

// The fragment ops and wgmma forms of the softmax role's step, lowered:
// - load_rows: unmasked 16-byte cp.async (8 of 8 source elements) into
//   the swizzled tile;
// - store_fragment with `transpose` writes each element to [col][row]:
//   the fragment's 8 x 8 matrices, four per stmatrix.x4.trans (col
//   layout), each thread's bf16 pair of a matrix as one register, and
//   lane 8 j + b giving the address of row b of matrix j (16 fragment
//   columns per instruction: 4 for n = 64); without it, the pairs of
//   consecutive columns are adjacent (one vector<2xbf16> store per pair);
// - pack_operand: 16 registers, each two elements rounded to bf16;
// - wgmma with a register A operand: m64n128k16 instructions with the four
//   A registers of each k step, tnspB 1 (B mn-major); with a tile A in
//   mn-major layout, tnspA and tnspB 1; one wait_group 0 for both;
// - store_rows: one vector<2xbf16> store per element pair (64 elements).

// CHECK-LABEL: gpu.func @fragments
// CHECK: nvvm.setmaxregister decrease 24
// CHECK-COUNT-2: nvgpu.device_async_copy %arg0[%arg2, %{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}], 8, %c8 {bypassL1}
// CHECK: nvvm.setmaxregister increase 240
// CHECK: memref.extract_aligned_pointer_as_index %reinterpret_cast
// CHECK-COUNT-4: nvvm.stmatrix %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>} : !llvm.ptr<3>, i32, i32, i32, i32
// CHECK-NOT: nvvm.stmatrix
// CHECK-COUNT-16: vector.bitcast %{{[0-9]+}} : vector<2xbf16> to vector<1xi32>
// CHECK: wgmma.fence.sync.aligned
// CHECK: setp.ne.b32 p, 1, 0;\0Awgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, {$64, $65, $66, $67}, $68, p, 1, 1, 1;
// CHECK-COUNT-3: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, {$64, $65, $66, $67}, $68, p, 1, 1, 1;
// CHECK: wgmma.commit_group.sync.aligned
// CHECK: wgmma.fence.sync.aligned
// CHECK: setp.ne.b32 p, 0, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, $32, $33, p, 1, 1, 1, 1;
// CHECK-COUNT-3: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, $32, $33, p, 1, 1, 1, 1;
// CHECK: wgmma.commit_group.sync.aligned
// CHECK: wgmma.wait_group.sync.aligned 0;
// CHECK-NOT: wgmma.wait_group
// CHECK-COUNT-32: vector.store %{{[0-9]+}}, %arg0[%arg2, %{{.*}}, %{{.*}}] : memref<?x64x128xbf16>, vector<2xbf16>
// CHECK-COUNT-16: vector.store %{{[0-9]+}}, %reinterpret_cast_{{[0-9]+}}[%{{[0-9]+}}] : memref<4096xbf16, #gpu.address_space<workgroup>>, vector<2xbf16>
// CHECK-NOT: smla_gpu.
gpu.module @m {
  gpu.func @fragments(%q: memref<?x64x128xbf16>, %lse: memref<64xf32>, %t: index) kernel
      attributes {known_block_size = array<i32: 384, 1, 1>} {
    %tile = memref.alloca() {alignment = 1024 : i64} : memref<64x128xbf16, #gpu.address_space<workgroup>>
    %pt = memref.alloca() {alignment = 1024 : i64} : memref<64x64xbf16, #gpu.address_space<workgroup>>
    %slots = memref.alloca() {alignment = 16 : i64} : memref<64xi32, #gpu.address_space<workgroup>>
    %c0 = arith.constant 0 : index
    smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"] registers [24, 240, 240] {
      smla_gpu.load_rows %q[%t, %c0] into %tile : memref<?x64x128xbf16>, memref<64x128xbf16, #gpu.address_space<workgroup>>
    }, {
      %l = smla_gpu.fragment_rows %lse {n = 64 : i64} : memref<64xf32> -> vector<32xf32>
      %c = smla_gpu.fragment_columns %slots {n = 64 : i64} : memref<64xi32, #gpu.address_space<workgroup>> -> vector<32xi32>
      smla_gpu.store_fragment %l into %pt {transpose, row = 0 : i64, col = 0 : i64} : vector<32xf32>, memref<64x64xbf16, #gpu.address_space<workgroup>>
      %a = smla_gpu.pack_operand %l : vector<32xf32> -> vector<16xi32>
      %acc = arith.constant dense<0.0> : vector<64xf32>
      %d = smla_gpu.wgmma a_regs(%a : vector<16xi32>) b_tile(%tile : memref<64x128xbf16, #gpu.address_space<workgroup>>) acc(%acc : vector<64xf32>) {n = 128 : i64, k_extent = 64 : i64, a_major = "k", b_major = "mn", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 0 : i64} -> vector<64xf32>
      %e = smla_gpu.wgmma a_tile(%pt : memref<64x64xbf16, #gpu.address_space<workgroup>>) b_tile(%tile : memref<64x128xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 64 : i64, a_major = "mn", b_major = "mn", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 64 : i64} -> vector<32xf32>
      %w:2 = smla_gpu.wgmma_wait 0, %d, %e : vector<64xf32>, vector<32xf32>
      smla_gpu.store_rows %w#0 into %q[%t, %c0] {col = 0 : i64} : vector<64xf32>, memref<?x64x128xbf16>
      %ci = arith.constant dense<0> : vector<32xi32>
      %ok = arith.cmpi sge, %c, %ci : vector<32xi32>
      %z = arith.constant dense<0.0> : vector<32xf32>
      %s = arith.select %ok, %w#1, %z : vector<32xi1>, vector<32xf32>
      smla_gpu.store_fragment %s into %pt {row = 0 : i64, col = 0 : i64} : vector<32xf32>, memref<64x64xbf16, #gpu.address_space<workgroup>>
    }, {
      %x = smla_gpu.thread_in_warpgroup : index
    }
    gpu.return
  }
}
