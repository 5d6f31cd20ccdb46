// RUN: smla-opt %s | FileCheck %s
// RUN: smla-opt %s | smla-opt | FileCheck %s
// RUN: smla-opt -mlir-print-op-generic %s | smla-opt | FileCheck %s

// Every op and attribute of the dialect round-trips.

// CHECK-LABEL: func.func @whole
// CHECK: smla.sparse_attention_bwd q(%{{.*}} : memref<?x16x576xbf16>) kv(%{{.*}} : memref<?x1x576xbf16>) o(%{{.*}} : memref<?x16x512xbf16>) dout(%{{.*}} : memref<?x16x512xbf16>) indices(%{{.*}} : memref<?x1x?xi32>) lse(%{{.*}} : memref<?x16xf32>) positions(%{{.*}} : memref<?xi32>) dq(%{{.*}} : memref<?x16x576xbf16>) dkv_accum(%{{.*}} : memref<?x1x576xf32>) dkv(%{{.*}} : memref<?x1x576xbf16>) counters(%{{.*}} : memref<4xi64>)
// CHECK-SAME: config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = true, dqType = bf16, dkvType = bf16>
// CHECK-SAME: sm_scale = 0.0416666679 : f32
func.func @whole(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>,
                 %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>,
                 %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>,
                 %pos: memref<?xi32>, %dq: memref<?x16x576xbf16>,
                 %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>,
                 %cnt: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>)
      kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>)
      dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>)
      lse(%lse : memref<?x16xf32>) positions(%pos : memref<?xi32>)
      dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>)
      dkv(%dkv : memref<?x1x576xbf16>) counters(%cnt : memref<4xi64>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1,
          block = 64, lseBase = base2, positions = true, dqType = bf16,
          dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// The minimal form: natural-log lse, f32 outputs, no positions or counters.
// CHECK-LABEL: func.func @minimal
// CHECK: smla.sparse_attention_bwd
// CHECK-NOT: positions(
// CHECK-NOT: dkv(
// CHECK-SAME: lseBase = natural, positions = false, dqType = f32, dkvType = f32
func.func @minimal(%q: memref<8x4x48xbf16>, %kv: memref<?x2x48xbf16>,
                   %o: memref<8x4x32xbf16>, %do: memref<8x4x32xbf16>,
                   %idx: memref<8x2x7xi32>, %lse: memref<8x4xf32>,
                   %dq: memref<8x4x48xf32>, %acc: memref<?x2x48xf32>) {
  smla.sparse_attention_bwd q(%q : memref<8x4x48xbf16>)
      kv(%kv : memref<?x2x48xbf16>) o(%o : memref<8x4x32xbf16>)
      dout(%do : memref<8x4x32xbf16>) indices(%idx : memref<8x2x7xi32>)
      lse(%lse : memref<8x4xf32>) dq(%dq : memref<8x4x48xf32>)
      dkv_accum(%acc : memref<?x2x48xf32>)
      {config = #smla.config<d = 32, dt = 16, heads = 4, groups = 2,
          block = 16, lseBase = natural, positions = false, dqType = f32,
          dkvType = f32>, sm_scale = 1.250000e-01 : f32}
  return
}

// CHECK-LABEL: func.func @tiles
func.func @tiles(%q: memref<?x4x48xbf16>, %kv: memref<?x2x48xbf16>,
                 %o: memref<?x4x32xbf16>, %do: memref<?x4x32xbf16>,
                 %idx: memref<?x2x?xi32>, %lse: memref<?x4xf32>,
                 %dq: memref<?x4x48xbf16>, %acc: memref<?x2x48xf32>,
                 %dkv: memref<?x2x48xbf16>, %cnt: memref<4xi64>,
                 %t: index, %g: index, %k0: index, %s: index, %n: index,
                 %pos: i32) {
  %keys = memref.alloca() : memref<16x48xbf16>
  %sc = memref.alloca() : memref<2x16xf32>
  %p = memref.alloca() : memref<2x16xf32>
  %dp = memref.alloca() : memref<2x16xf32>
  %ds = memref.alloca() : memref<2x16xf32>
  %dqa = memref.alloca() : memref<2x48xf32>
  %delta = memref.alloca() : memref<2xf32>
  // CHECK: smla.delta %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] into %{{.*}} : memref<?x4x32xbf16>, memref<?x4x32xbf16>, memref<2xf32>
  smla.delta %o, %do[%t, %g] into %delta
      : memref<?x4x32xbf16>, memref<?x4x32xbf16>, memref<2xf32>
  // CHECK: smla.delta %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] given(%{{.*}} : memref<?x4xf32>) into %{{.*}} : memref<?x4x32xbf16>, memref<?x4x32xbf16>, memref<2xf32>
  smla.delta %o, %do[%t, %g] given(%lse : memref<?x4xf32>) into %delta
      : memref<?x4x32xbf16>, memref<?x4x32xbf16>, memref<2xf32>
  // CHECK: %[[IDX:.*]] = smla.index_load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] limit %{{.*}} counters(%{{.*}} : memref<4xi64>) : memref<?x2x?xi32> -> vector<16xi32>
  %i = smla.index_load %idx[%t, %g, %k0] limit %pos counters(%cnt : memref<4xi64>)
      : memref<?x2x?xi32> -> vector<16xi32>
  // CHECK: smla.index_load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : memref<?x2x?xi32> -> vector<16xi32>
  %i2 = smla.index_load %idx[%t, %g, %k0] : memref<?x2x?xi32> -> vector<16xi32>
  // CHECK: smla.index_load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] length %{{.*}} : memref<?x2x?xi32> -> vector<16xi32>
  %i3 = smla.index_load %idx[%t, %g, %k0] length %n : memref<?x2x?xi32> -> vector<16xi32>
  // CHECK: %[[M:.*]] = smla.index_mask %[[IDX]] below %{{.*}} lanes %{{.*}} limit %{{.*}} counters(%{{.*}} : memref<4xi64>) : vector<16xi32> -> vector<16xi1>
  %m = smla.index_mask %i below %s lanes %n limit %pos counters(%cnt : memref<4xi64>)
      : vector<16xi32> -> vector<16xi1>
  // CHECK: smla.index_mask %{{.*}} below %{{.*}} lanes %{{.*}} : vector<16xi32> -> vector<16xi1>
  %m2 = smla.index_mask %i2 below %s lanes %n : vector<16xi32> -> vector<16xi1>
  // CHECK: %[[L:.*]] = smla.row_live %{{.*}}[%{{.*}}, %{{.*}}] counters(%{{.*}} : memref<4xi64>) : memref<?x4xf32> -> vector<2xi1>
  %live = smla.row_live %lse[%t, %g] counters(%cnt : memref<4xi64>)
      : memref<?x4xf32> -> vector<2xi1>
  // CHECK: smla.gather %{{.*}}[%{{.*}}] rows(%[[IDX]]) mask(%[[M]] : vector<16xi1>) into %{{.*}} : memref<?x2x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.gather %kv[%g] rows(%i) mask(%m : vector<16xi1>) into %keys
      : memref<?x2x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  // CHECK: smla.gather %{{.*}}[%{{.*}}] rows(%{{.*}}) into %{{.*}} : memref<?x2x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.gather %kv[%g] rows(%i2) into %keys
      : memref<?x2x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  // CHECK: smla.tile_dot %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} into %{{.*}} : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<2x16xf32>
  smla.tile_dot %q[%t, %g], %keys into %sc
      : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<2x16xf32>
  // CHECK: smla.softmax %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] mask(%[[M]] : vector<16xi1>) live(%[[L]] : vector<2xi1>) counters(%{{.*}} : memref<4xi64>) into %{{.*}} {base = #smla<lse_base natural>, clamp = 3.200000e+01 : f32, scale = 1.250000e-01 : f32}
  smla.softmax %sc, %lse[%t, %g] mask(%m : vector<16xi1>)
      live(%live : vector<2xi1>) counters(%cnt : memref<4xi64>) into %p
      {base = #smla<lse_base natural>, clamp = 32.0 : f32, scale = 0.125 : f32}
      : memref<2x16xf32>, memref<?x4xf32>, memref<2x16xf32>
  // CHECK: smla.softmax %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] into %{{.*}} {base = #smla<lse_base base2>, scale = 1.250000e-01 : f32}
  smla.softmax %sc, %lse[%t, %g] into %p
      {base = #smla<lse_base base2>, scale = 0.125 : f32}
      : memref<2x16xf32>, memref<?x4xf32>, memref<2x16xf32>
  // CHECK: smla.dscores %{{.*}}, %{{.*}}, %{{.*}} into %{{.*}} {scale = 1.250000e-01 : f32}
  smla.dscores %p, %dp, %delta into %ds {scale = 0.125 : f32}
      : memref<2x16xf32>, memref<2x16xf32>, memref<2xf32>, memref<2x16xf32>
  // CHECK: smla.dq_accumulate %{{.*}}, %{{.*}} into %{{.*}} : memref<2x16xf32>, memref<16x48xbf16>, memref<2x48xf32>
  smla.dq_accumulate %ds, %keys into %dqa
      : memref<2x16xf32>, memref<16x48xbf16>, memref<2x48xf32>
  // CHECK: smla.scatter_dkv %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] rows(%[[IDX]]) mask(%[[M]] : vector<16xi1>) into %{{.*}}[%{{.*}}] : memref<2x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x2x48xf32>
  smla.scatter_dkv %ds, %p, %q, %do[%t, %g] rows(%i) mask(%m : vector<16xi1>)
      into %acc[%g] : memref<2x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>,
      vector<16xi32>, memref<?x2x48xf32>
  // The two halves of a deferred scatter (smla-defer-scatter).
  %packed = memref.alloca() : memref<2x16x2xbf16>
  %slots = memref.alloca() : memref<16xi32>
  // CHECK: smla.pack_dkv %{{.*}}, %{{.*}} rows(%[[IDX]]) mask(%[[M]] : vector<16xi1>) into %{{.*}}, %{{.*}} : memref<2x16xf32>, vector<16xi32>, memref<2x16x2xbf16>, memref<16xi32>
  smla.pack_dkv %ds, %p rows(%i) mask(%m : vector<16xi1>) into %packed, %slots
      : memref<2x16xf32>, vector<16xi32>, memref<2x16x2xbf16>, memref<16xi32>
  // CHECK: smla.scatter_packed %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] into %{{.*}}[%{{.*}}] {chunk = 1 : i64, chunks = 3 : i64}
  smla.scatter_packed %packed, %slots, %q, %do[%t, %g] into %acc[%g]
      {chunk = 1 : i64, chunks = 3 : i64} : memref<2x16x2xbf16>,
      memref<16xi32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>,
      memref<?x2x48xf32>
  // Their cluster forms (a token's two head blocks splitting the columns).
  %rows = memref.alloca() : memref<4x24xbf16>
  %partner = memref.alloca() : memref<4x16x2xbf16>
  %bars = memref.alloca() : memref<2xi64>
  %count = memref.alloca() : memref<i32>
  // CHECK: smla.pack_dkv {{.*}} into %{{.*}}, %{{.*}} cluster(%{{.*}}, %{{.*}}, %{{.*}} : memref<4x16x2xbf16>, memref<2xi64>, memref<i32>) : memref<2x16xf32>
  smla.pack_dkv %ds, %p rows(%i) mask(%m : vector<16xi1>) into %packed, %slots
      cluster(%partner, %bars, %count : memref<4x16x2xbf16>, memref<2xi64>,
              memref<i32>)
      : memref<2x16xf32>, vector<16xi32>, memref<2x16x2xbf16>, memref<16xi32>
  // CHECK: smla.scatter_packed {{.*}} into %{{.*}}[%{{.*}}] cluster(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<4x24xbf16>, memref<4x16x2xbf16>, memref<2xi64>, memref<i32>) {chunk = 0 : i64, chunks = 3 : i64}
  smla.scatter_packed %packed, %slots, %q, %do[%t, %g] into %acc[%g]
      cluster(%rows, %partner, %bars, %count : memref<4x24xbf16>,
              memref<4x16x2xbf16>, memref<2xi64>, memref<i32>)
      {chunk = 0 : i64, chunks = 3 : i64} : memref<2x16x2xbf16>,
      memref<16xi32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>,
      memref<?x2x48xf32>
  // The cluster's mbarriers, initialised at the kernel's start.
  %wbars = memref.alloca() : memref<2xi64, #gpu.address_space<workgroup>>
  // CHECK: smla.cluster_init %{{.*}} : memref<2xi64, #gpu.address_space<workgroup>>
  smla.cluster_init %wbars : memref<2xi64, #gpu.address_space<workgroup>>
  // CHECK: smla.dq_packed %{{.*}}, %{{.*}} into %{{.*}} : memref<2x16x2xbf16>, memref<16x48xbf16>, memref<2x48xf32>
  smla.dq_packed %packed, %keys into %dqa
      : memref<2x16x2xbf16>, memref<16x48xbf16>, memref<2x48xf32>
  // CHECK: smla.store_dq %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] : memref<2x48xf32>, memref<?x4x48xbf16>
  smla.store_dq %dqa into %dq[%t, %g] : memref<2x48xf32>, memref<?x4x48xbf16>
  // CHECK: smla.cast_dkv %{{.*}} into %{{.*}} : memref<?x2x48xf32>, memref<?x2x48xbf16>
  smla.cast_dkv %acc into %dkv : memref<?x2x48xf32>, memref<?x2x48xbf16>
  return
}

// The non-finite row guard: store_dq and cast_dkv count into `counters`;
// a cast without `into` only counts (an f32 result).
// CHECK-LABEL: func.func @nonfinite_row_counts
// CHECK: smla.store_dq %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] counters(%{{.*}} : memref<4xi64>) : memref<2x48xf32>, memref<?x4x48xbf16>
// CHECK: smla.cast_dkv %{{.*}} into %{{.*}} counters(%{{.*}} : memref<4xi64>) : memref<?x2x48xf32>, memref<?x2x48xbf16>
// CHECK: smla.cast_dkv %{{.*}} counters(%{{.*}} : memref<4xi64>) : memref<?x2x48xf32>
func.func @nonfinite_row_counts(%acc: memref<2x48xf32>, %dq: memref<?x4x48xbf16>,
                                %dacc: memref<?x2x48xf32>, %dkv: memref<?x2x48xbf16>,
                                %cnt: memref<4xi64>, %t: index) {
  smla.store_dq %acc into %dq[%t, %t] counters(%cnt : memref<4xi64>) : memref<2x48xf32>, memref<?x4x48xbf16>
  smla.cast_dkv %dacc into %dkv counters(%cnt : memref<4xi64>) : memref<?x2x48xf32>, memref<?x2x48xbf16>
  smla.cast_dkv %dacc counters(%cnt : memref<4xi64>) : memref<?x2x48xf32>
  return
}

// CHECK-LABEL: func.func @token_pair_ops
// CHECK: %{{.*}}, %{{.*}}, %{{.*}} = smla.index_pair %{{.*}} mask(%{{.*}}), %{{.*}} mask(%{{.*}}) : vector<16xi32>, vector<16xi1>
// CHECK: smla.softmax %{{.*}} mask(%{{.*}} : vector<16xi1>) pair_mask(%{{.*}} : vector<16xi1>) into
// CHECK: smla.pair_union %{{.*}}[%{{.*}}] below %{{.*}} into %{{.*}}, %{{.*}} scratch(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
func.func @token_pair_ops(%a: vector<16xi32>, %ma: vector<16xi1>, %b: vector<16xi32>, %mb: vector<16xi1>, %s: memref<4x16xf32>, %lse: memref<?x4xf32>, %p: memref<4x16xf32>, %t: index, %idx: memref<?x1x?xi32>, %rows: memref<?x1x?xi32>, %c: memref<?xi32>, %k: memref<128xi32>, %r: memref<64xi32>, %w: memref<32xi32>) {
  %u, %m, %keep = smla.index_pair %a mask(%ma), %b mask(%mb) : vector<16xi32>, vector<16xi1>
  smla.softmax %s, %lse[%t, %t] mask(%ma : vector<16xi1>) pair_mask(%mb : vector<16xi1>) into %p {base = #smla<lse_base base2>, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  smla.pair_union %idx[%t] below %t into %rows, %c scratch(%k, %k, %r, %w) : memref<?x1x?xi32>, memref<?x1x?xi32>, memref<?xi32>, memref<128xi32>, memref<128xi32>, memref<64xi32>, memref<32xi32>
  return
}
