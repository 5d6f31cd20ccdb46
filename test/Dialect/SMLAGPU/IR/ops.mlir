// RUN: smla-opt %s | smla-opt | FileCheck %s
// Every smla_gpu op prints and parses back.

// CHECK-LABEL: gpu.func @roles
gpu.module @m {
  gpu.func @roles(%kv: memref<?x1x576xbf16>, %q: memref<?x64x576xbf16>,
                  %dkv: memref<?x1x576xf32>, %lse: memref<64xf32>,
                  %cnt: memref<3xi64>, %idx: vector<64xi32>,
                  %mask: vector<64xi1>, %t: index, %g: index) kernel
      attributes {known_block_size = array<i32: 384, 1, 1>} {
    %bars = memref.alloca() : memref<2xi64, #gpu.address_space<workgroup>>
    %keys = memref.alloca() {alignment = 1024 : i64} : memref<64x576xbf16, #gpu.address_space<workgroup>>
    %slots = memref.alloca() : memref<64xi32, #gpu.address_space<workgroup>>
    %c0 = arith.constant 0 : index
    // CHECK: smla_gpu.pipeline_create %{{.*}} {async_copies} : memref<2xi64, #gpu.address_space<workgroup>> -> !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    %p = smla_gpu.pipeline_create %bars {async_copies} : memref<2xi64, #gpu.address_space<workgroup>> -> !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    // CHECK: smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"] registers [40, 232, 232]
    smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"] registers [40, 232, 232] {
      // CHECK: smla_gpu.thread_in_warpgroup : index
      %tid = smla_gpu.thread_in_warpgroup : index
      // CHECK: smla_gpu.producer_acquire %{{.*}}[%{{.*}}]
      smla_gpu.producer_acquire %p[%c0] : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
      // CHECK: smla_gpu.write_slots %{{.*}} masks(%{{.*}} : vector<64xi1>) into
      smla_gpu.write_slots %idx masks(%mask : vector<64xi1>) into %slots : vector<64xi32>, memref<64xi32, #gpu.address_space<workgroup>>
      // CHECK: smla_gpu.gather_keys %{{.*}}[%{{.*}}] group(%{{.*}}) mask(%{{.*}} : vector<64xi1>) into
      smla_gpu.gather_keys %kv[%idx] group(%g) mask(%mask : vector<64xi1>) into %keys : memref<?x1x576xbf16>, vector<64xi32>, memref<64x576xbf16, #gpu.address_space<workgroup>>
      // CHECK: smla_gpu.load_rows %{{.*}}[%{{.*}}, %{{.*}}] into
      smla_gpu.load_rows %q[%t, %c0] into %keys : memref<?x64x576xbf16>, memref<64x576xbf16, #gpu.address_space<workgroup>>
      // CHECK: smla_gpu.producer_commit
      smla_gpu.producer_commit %p[%c0] : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    }, {
      smla_gpu.consumer_wait %p[%c0] : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
      // CHECK: smla_gpu.wgmma a_tile(%{{.*}} : memref<64x576xbf16, #gpu.address_space<workgroup>>) b_tile(%{{.*}} : memref<64x576xbf16, #gpu.address_space<workgroup>>) {a_col = 0 : i64, a_major = "k", a_row = 0 : i64, b_col = 0 : i64, b_major = "k", b_row = 0 : i64, k_extent = 576 : i64, n = 64 : i64} -> vector<32xf32>
      %s = smla_gpu.wgmma a_tile(%keys : memref<64x576xbf16, #gpu.address_space<workgroup>>) b_tile(%keys : memref<64x576xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 576 : i64, a_major = "k", b_major = "k", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 0 : i64} -> vector<32xf32>
      // CHECK: smla_gpu.wgmma_wait 0, %{{.*}} : vector<32xf32>
      %s1 = smla_gpu.wgmma_wait 0, %s : vector<32xf32>
      // CHECK: smla_gpu.pack_operand %{{.*}} : vector<32xf32> -> vector<16xi32>
      %a = smla_gpu.pack_operand %s1 : vector<32xf32> -> vector<16xi32>
      // CHECK: smla_gpu.wgmma a_regs(%{{.*}} : vector<16xi32>) b_tile
      %dq = smla_gpu.wgmma a_regs(%a : vector<16xi32>) b_tile(%keys : memref<64x576xbf16, #gpu.address_space<workgroup>>) acc(%s1 : vector<32xf32>) {n = 64 : i64, k_extent = 64 : i64, a_major = "k", b_major = "mn", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 64 : i64} -> vector<32xf32>
      // CHECK: smla_gpu.fragment_rows %{{.*}} {n = 64 : i64} : memref<64xf32> -> vector<32xf32>
      %l = smla_gpu.fragment_rows %lse {n = 64 : i64} : memref<64xf32> -> vector<32xf32>
      // CHECK: smla_gpu.fragment_columns
      %c = smla_gpu.fragment_columns %slots {n = 64 : i64} : memref<64xi32, #gpu.address_space<workgroup>> -> vector<32xi32>
      %z = arith.constant dense<0> : vector<32xi32>
      %ok = arith.cmpi sge, %c, %z : vector<32xi32>
      // CHECK: smla_gpu.count %{{.*}} into %{{.*}}[2]
      smla_gpu.count %ok into %cnt[2] : vector<32xi1>, memref<3xi64>
      // CHECK: smla_gpu.store_fragment %{{.*}} into %{{.*}} {col = 0 : i64, row = 0 : i64, transpose}
      smla_gpu.store_fragment %l into %keys {transpose, row = 0 : i64, col = 0 : i64} : vector<32xf32>, memref<64x576xbf16, #gpu.address_space<workgroup>>
      // CHECK: smla_gpu.consumer_release
      smla_gpu.consumer_release %p[%c0] : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    }, {
      %r = smla_gpu.fragment_rows %slots {n = 64 : i64} : memref<64xi32, #gpu.address_space<workgroup>> -> vector<32xi32>
      %zero = arith.constant dense<0.0> : vector<32xf32>
      // CHECK: smla_gpu.reduce_dkv %{{.*}} slots(%{{.*}} : vector<32xi32>) into %{{.*}}[%{{.*}}] {col = 64 : i64}
      smla_gpu.reduce_dkv %zero slots(%r : vector<32xi32>) into %dkv[%g] {col = 64 : i64} : vector<32xf32>, memref<?x1x576xf32>
      // CHECK: smla_gpu.store_rows %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] {col = 0 : i64}
      smla_gpu.store_rows %zero into %q[%t, %c0] {col = 0 : i64} : vector<32xf32>, memref<?x64x576xbf16>
    }
    %cnt4 = memref.alloca() : memref<4xi64>
    // CHECK: smla_gpu.count_nonfinite_rows %{{.*}}[%{{.*}}, %{{.*}}] into %{{.*}} : memref<?x64x576xbf16>, memref<4xi64>
    smla_gpu.count_nonfinite_rows %q[%t, %c0] into %cnt4 : memref<?x64x576xbf16>, memref<4xi64>
    gpu.return
  }
}
