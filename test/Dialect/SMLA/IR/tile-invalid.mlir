// RUN: smla-opt %s -split-input-file -verify-diagnostics

// Every verifier error of the tile ops.

func.func @delta_types(%o: memref<?x4x32xbf16>, %do: memref<?x4x16xbf16>, %t: index, %d: memref<2xf32>) {
  // expected-error @+1 {{operands 'o' and 'dout' must have the same type}}
  smla.delta %o, %do[%t, %t] into %d : memref<?x4x32xbf16>, memref<?x4x16xbf16>, memref<2xf32>
  return
}

// -----

func.func @delta_given_heads(%o: memref<?x4x32xbf16>, %t: index, %g: memref<?x2xf32>, %d: memref<2xf32>) {
  // expected-error @+1 {{operand 'given' must have the heads of 'o' (4), got 2}}
  smla.delta %o, %o[%t, %t] given(%g : memref<?x2xf32>) into %d : memref<?x4x32xbf16>, memref<?x4x32xbf16>, memref<2xf32>
  return
}

// -----

func.func @delta_heads(%o: memref<?x4x32xbf16>, %t: index, %d: memref<3xf32>) {
  // expected-error @+1 {{heads of 'o' (4) must be a static multiple of the tile's heads per group (3)}}
  smla.delta %o, %o[%t, %t] into %d : memref<?x4x32xbf16>, memref<?x4x32xbf16>, memref<3xf32>
  return
}

// -----

func.func @mask_length(%i: vector<16xi32>, %s: index) {
  // expected-error @+1 {{length of 'mask' (8) must equal the number of indices (16)}}
  %m = smla.index_mask %i below %s lanes %s : vector<16xi32> -> vector<8xi1>
  return
}

// -----

func.func @gather_rows(%kv: memref<?x1x48xbf16>, %i: vector<16xi32>, %t: index, %tile: memref<8x48xbf16>) {
  // expected-error @+1 {{length of 'tile rows' (8) must equal the number of indices (16)}}
  smla.gather %kv[%t] rows(%i) into %tile : memref<?x1x48xbf16>, vector<16xi32>, memref<8x48xbf16>
  return
}

// -----

func.func @gather_mask(%kv: memref<?x1x48xbf16>, %i: vector<16xi32>, %m: vector<8xi1>, %t: index, %tile: memref<16x48xbf16>) {
  // expected-error @+1 {{length of 'mask' (8) must equal the number of indices (16)}}
  smla.gather %kv[%t] rows(%i) mask(%m : vector<8xi1>) into %tile : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @gather_split(%kv: memref<?x1x48xbf16>, %i: vector<16xi32>, %t: index, %tile: memref<16x48xbf16>) {
  // expected-error @+1 {{cannot be both issue_only and wait_only}}
  smla.gather %kv[%t] rows(%i) into %tile {issue_only, wait_only} : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @gather_width(%kv: memref<?x1x48xbf16>, %i: vector<16xi32>, %t: index, %tile: memref<16x32xbf16>) {
  // expected-error @+1 {{tile width (32) is less than the kv row width (48)}}
  smla.gather %kv[%t] rows(%i) into %tile : memref<?x1x48xbf16>, vector<16xi32>, memref<16x32xbf16>
  return
}

// -----

func.func @gather_index_type(%kv: memref<?x1x48xbf16>, %i: vector<16xi64>, %t: index, %tile: memref<16x48xbf16>) {
  // expected-error @+1 {{operand #2 must be vector of 32-bit signless integer values of ranks 1}}
  smla.gather %kv[%t] rows(%i) into %tile : memref<?x1x48xbf16>, vector<16xi64>, memref<16x48xbf16>
  return
}

// -----

func.func @dot_heads(%q: memref<?x4x48xbf16>, %t: index, %tile: memref<16x48xbf16>, %r: memref<3x16xf32>) {
  // expected-error @+1 {{heads of 'lhs' (4) must be a static multiple of the tile's heads per group (3)}}
  smla.tile_dot %q[%t, %t], %tile into %r : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<3x16xf32>
  return
}

// -----

func.func @dot_columns(%q: memref<?x4x48xbf16>, %t: index, %tile: memref<16x48xbf16>, %r: memref<4x8xf32>) {
  // expected-error @+1 {{length of 'result columns' (8) must equal tile rows (16)}}
  smla.tile_dot %q[%t, %t], %tile into %r : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x8xf32>
  return
}

// -----

func.func @dot_width(%q: memref<?x4x64xbf16>, %t: index, %tile: memref<16x48xbf16>, %r: memref<4x16xf32>) {
  // expected-error @+1 {{contraction width (64) exceeds the tile width (48)}}
  smla.tile_dot %q[%t, %t], %tile into %r : memref<?x4x64xbf16>, memref<16x48xbf16>, memref<4x16xf32>
  return
}

// -----

func.func @softmax_types(%s: memref<4x16xf32>, %lse: memref<?x4xf32>, %t: index, %p: memref<4x8xf32>) {
  // expected-error @+1 {{operands 'scores' and 'probs' must have the same type}}
  smla.softmax %s, %lse[%t, %t] into %p {base = #smla<lse_base base2>, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x8xf32>
  return
}

// -----

func.func @softmax_mask(%s: memref<4x16xf32>, %lse: memref<?x4xf32>, %t: index, %m: vector<8xi1>) {
  // expected-error @+1 {{length of 'mask' (8) must equal the block size (16)}}
  smla.softmax %s, %lse[%t, %t] mask(%m : vector<8xi1>) into %s {base = #smla<lse_base base2>, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @softmax_live(%s: memref<4x16xf32>, %lse: memref<?x4xf32>, %t: index, %l: vector<2xi1>) {
  // expected-error @+1 {{length of 'live' (2) must equal the heads per group (4)}}
  smla.softmax %s, %lse[%t, %t] live(%l : vector<2xi1>) into %s {base = #smla<lse_base base2>, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @softmax_clamp(%s: memref<4x16xf32>, %lse: memref<?x4xf32>, %t: index) {
  // expected-error @+1 {{clamp must be in [0, 64.00] so that exp2 stays finite, got 200.00}}
  smla.softmax %s, %lse[%t, %t] into %s {base = #smla<lse_base base2>, clamp = 200.0 : f32, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @softmax_clamp_nan(%s: memref<4x16xf32>, %lse: memref<?x4xf32>, %t: index) {
  // expected-error @+1 {{clamp must be in [0, 64.00] so that exp2 stays finite, got nan}}
  smla.softmax %s, %lse[%t, %t] into %s {base = #smla<lse_base base2>, clamp = 0x7FC00000 : f32, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @softmax_lse_heads(%s: memref<3x16xf32>, %lse: memref<?x4xf32>, %t: index) {
  // expected-error @+1 {{heads of 'lse' (4) must be a static multiple of the tile's heads per group (3)}}
  smla.softmax %s, %lse[%t, %t] into %s {base = #smla<lse_base base2>, scale = 1.0 : f32} : memref<3x16xf32>, memref<?x4xf32>, memref<3x16xf32>
  return
}

// -----

func.func @dscores_types(%p: memref<4x16xf32>, %dp: memref<4x8xf32>, %d: memref<4xf32>) {
  // expected-error @+1 {{operands 'probs', 'dp' and 'ds' must have the same type}}
  smla.dscores %p, %dp, %d into %p {scale = 1.0 : f32} : memref<4x16xf32>, memref<4x8xf32>, memref<4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @dscores_delta(%p: memref<4x16xf32>, %d: memref<2xf32>) {
  // expected-error @+1 {{length of 'delta' (2) must equal the heads per group (4)}}
  smla.dscores %p, %p, %d into %p {scale = 1.0 : f32} : memref<4x16xf32>, memref<4x16xf32>, memref<2xf32>, memref<4x16xf32>
  return
}

// -----

func.func @dq_columns(%ds: memref<4x8xf32>, %tile: memref<16x48xbf16>, %acc: memref<4x48xf32>) {
  // expected-error @+1 {{length of 'ds columns' (8) must equal tile rows (16)}}
  smla.dq_accumulate %ds, %tile into %acc : memref<4x8xf32>, memref<16x48xbf16>, memref<4x48xf32>
  return
}

// -----

func.func @dq_rows(%ds: memref<4x16xf32>, %tile: memref<16x48xbf16>, %acc: memref<2x48xf32>) {
  // expected-error @+1 {{length of 'acc rows' (2) must equal ds rows (4)}}
  smla.dq_accumulate %ds, %tile into %acc : memref<4x16xf32>, memref<16x48xbf16>, memref<2x48xf32>
  return
}

// -----

func.func @dq_width(%ds: memref<4x16xf32>, %tile: memref<16x48xbf16>, %acc: memref<4x64xf32>) {
  // expected-error @+1 {{acc width (64) exceeds the tile width (48)}}
  smla.dq_accumulate %ds, %tile into %acc : memref<4x16xf32>, memref<16x48xbf16>, memref<4x64xf32>
  return
}

// -----

func.func @scatter_width(%ds: memref<4x16xf32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %t: index, %i: vector<16xi32>, %dkv: memref<?x1x64xf32>) {
  // expected-error @+1 {{dkv width (64) must equal the q width (48)}}
  smla.scatter_dkv %ds, %ds, %q, %do[%t, %t] rows(%i) into %dkv[%t] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x64xf32>
  return
}

// -----

func.func @scatter_lanes(%ds: memref<4x8xf32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %t: index, %i: vector<16xi32>, %dkv: memref<?x1x48xf32>) {
  // expected-error @+1 {{length of 'ds columns' (8) must equal the number of indices (16)}}
  smla.scatter_dkv %ds, %ds, %q, %do[%t, %t] rows(%i) into %dkv[%t] : memref<4x8xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @scatter_mask(%ds: memref<4x16xf32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %t: index, %i: vector<16xi32>, %m: vector<4xi1>, %dkv: memref<?x1x48xf32>) {
  // expected-error @+1 {{length of 'mask' (4) must equal the number of indices (16)}}
  smla.scatter_dkv %ds, %ds, %q, %do[%t, %t] rows(%i) mask(%m : vector<4xi1>) into %dkv[%t] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @scatter_dout(%ds: memref<4x16xf32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x64xbf16>, %t: index, %i: vector<16xi32>, %dkv: memref<?x1x48xf32>) {
  // expected-error @+1 {{dout must be [T, H, D] with D <= the q width}}
  smla.scatter_dkv %ds, %ds, %q, %do[%t, %t] rows(%i) into %dkv[%t] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x64xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @store_width(%acc: memref<4x32xf32>, %dq: memref<?x4x48xbf16>, %t: index) {
  // expected-error @+1 {{acc width (32) must equal the dq width (48)}}
  smla.store_dq %acc into %dq[%t, %t] : memref<4x32xf32>, memref<?x4x48xbf16>
  return
}

// -----

func.func @store_heads(%acc: memref<3x48xf32>, %dq: memref<?x4x48xbf16>, %t: index) {
  // expected-error @+1 {{heads of 'dq' (4) must be a static multiple of the tile's heads per group (3)}}
  smla.store_dq %acc into %dq[%t, %t] : memref<3x48xf32>, memref<?x4x48xbf16>
  return
}

// -----

func.func @cast_shape(%acc: memref<?x1x48xf32>, %dkv: memref<?x2x48xbf16>) {
  // expected-error @+1 {{accum and dkv must have the same shape, got 'memref<?x1x48xf32>' and 'memref<?x2x48xbf16>'}}
  smla.cast_dkv %acc into %dkv : memref<?x1x48xf32>, memref<?x2x48xbf16>
  return
}

// -----

func.func @cast_nothing(%acc: memref<?x1x48xf32>) {
  // expected-error @+1 {{needs 'dkv' to round into, 'counters' to count into, or both}}
  smla.cast_dkv %acc : memref<?x1x48xf32>
  return
}

// -----

func.func @store_counter_slots(%acc: memref<4x48xf32>, %dq: memref<?x4x48xbf16>, %t: index,
                               %cnt: memref<3xi64>) {
  // expected-error @+1 {{operand 'counters' must have 4 elements, got 3}}
  smla.store_dq %acc into %dq[%t, %t] counters(%cnt : memref<3xi64>) : memref<4x48xf32>, memref<?x4x48xbf16>
  return
}

// -----

func.func @pair_mask_length(%a: vector<16xi32>, %ma: vector<8xi1>, %b: vector<16xi32>, %mb: vector<8xi1>) {
  // expected-error @+1 {{length of 'mask' (8) must equal the number of indices (16)}}
  %u, %m, %keep = smla.index_pair %a mask(%ma), %b mask(%mb) : vector<16xi32>, vector<8xi1>
  return
}

// -----

func.func @pair_mask_without_mask(%s: memref<4x16xf32>, %lse: memref<?x4xf32>, %p: memref<4x16xf32>, %t: index, %m: vector<16xi1>) {
  // expected-error @+1 {{has a 'pair_mask' but no 'mask'}}
  smla.softmax %s, %lse[%t, %t] pair_mask(%m : vector<16xi1>) into %p {base = #smla<lse_base base2>, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @pair_union_table(%idx: memref<?x1x?xi32>, %p: index, %s: index, %rows: memref<?x1x?xi32>, %c: memref<?xi32>, %k: memref<100xi32>, %r: memref<64xi32>, %w: memref<32xi32>) {
  // expected-error @+1 {{keys and positions must have the same static power-of-two length}}
  smla.pair_union %idx[%p] below %s into %rows, %c scratch(%k, %k, %r, %w) : memref<?x1x?xi32>, memref<?x1x?xi32>, memref<?xi32>, memref<100xi32>, memref<100xi32>, memref<64xi32>, memref<32xi32>
  return
}

// -----

func.func @pack_dkv_shape(%ds: memref<2x16xf32>, %i: vector<16xi32>, %m: vector<16xi1>, %packed: memref<2x16x4xbf16>, %slots: memref<16xi32>) {
  // expected-error @+1 {{packed must be [2, 16, 2] (dS and P, slots x rows)}}
  smla.pack_dkv %ds, %ds rows(%i) mask(%m : vector<16xi1>) into %packed, %slots : memref<2x16xf32>, vector<16xi32>, memref<2x16x4xbf16>, memref<16xi32>
  return
}

// -----

func.func @pack_dkv_slots(%ds: memref<2x16xf32>, %i: vector<16xi32>, %m: vector<16xi1>, %packed: memref<2x16x2xbf16>, %slots: memref<8xi32>) {
  // expected-error @+1 {{length of 'slots' (8) must equal the number of indices (16)}}
  smla.pack_dkv %ds, %ds rows(%i) mask(%m : vector<16xi1>) into %packed, %slots : memref<2x16xf32>, vector<16xi32>, memref<2x16x2xbf16>, memref<8xi32>
  return
}

// -----

func.func @scatter_packed_chunk(%packed: memref<2x16x4xbf16>, %slots: memref<16xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %acc: memref<?x1x48xf32>, %t: index, %g: index) {
  // expected-error @+1 {{chunk 3 of 3 must split the q width (48) into equal parts}}
  smla.scatter_packed %packed, %slots, %q, %do[%t, %g] into %acc[%g] {chunk = 3 : i64, chunks = 3 : i64} : memref<2x16x4xbf16>, memref<16xi32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, memref<?x1x48xf32>
  return
}

// -----

func.func @pack_dkv_cluster(%ds: memref<2x16xf32>, %i: vector<16xi32>, %m: vector<16xi1>, %packed: memref<2x16x2xbf16>, %slots: memref<16xi32>, %bars: memref<2xi64>, %count: memref<i32>) {
  // expected-error @+1 {{cluster takes the partner tiles, the mbarriers and the count}}
  smla.pack_dkv %ds, %ds rows(%i) mask(%m : vector<16xi1>) into %packed, %slots cluster(%bars, %count : memref<2xi64>, memref<i32>) : memref<2x16xf32>, vector<16xi32>, memref<2x16x2xbf16>, memref<16xi32>
  return
}

// -----

func.func @scatter_packed_cluster(%packed: memref<2x16x4xbf16>, %slots: memref<16xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %bars: memref<2xi64>, %count: memref<i32>) {
  // expected-error @+1 {{cluster takes the partner rows, the partner tiles, the mbarriers and the count}}
  smla.scatter_packed %packed, %slots, %q, %do[%t, %g] into %acc[%g] cluster(%bars, %count : memref<2xi64>, memref<i32>) {chunk = 0 : i64, chunks = 3 : i64} : memref<2x16x4xbf16>, memref<16xi32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, memref<?x1x48xf32>
  return
}

// -----

func.func @scatter_packed_width(%packed: memref<2x16x4xbf16>, %slots: memref<16xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %acc: memref<?x1x32xf32>, %t: index, %g: index) {
  // expected-error @+1 {{dkv width (32) must equal the q width (48)}}
  smla.scatter_packed %packed, %slots, %q, %do[%t, %g] into %acc[%g] {chunk = 0 : i64, chunks = 3 : i64} : memref<2x16x4xbf16>, memref<16xi32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, memref<?x1x32xf32>
  return
}

// -----

func.func @dq_packed_slots(%packed: memref<2x16x2xbf16>, %keys: memref<32x48xbf16>, %acc: memref<2x48xf32>) {
  // expected-error @+1 {{length of 'packed slots' (16) must equal tile rows (32)}}
  smla.dq_packed %packed, %keys into %acc : memref<2x16x2xbf16>, memref<32x48xbf16>, memref<2x48xf32>
  return
}

// -----

func.func @dq_packed_rows(%packed: memref<2x16x4xbf16>, %keys: memref<16x48xbf16>, %acc: memref<2x48xf32>) {
  // expected-error @+1 {{length of 'acc rows' (2) must equal packed rows (4)}}
  smla.dq_packed %packed, %keys into %acc : memref<2x16x4xbf16>, memref<16x48xbf16>, memref<2x48xf32>
  return
}

// -----

func.func @dq_packed_two(%packed: memref<1x16x2xbf16>, %keys: memref<16x48xbf16>, %acc: memref<2x48xf32>) {
  // expected-error @+1 {{packed must hold two products (dS and P)}}
  smla.dq_packed %packed, %keys into %acc : memref<1x16x2xbf16>, memref<16x48xbf16>, memref<2x48xf32>
  return
}

// -----

func.func @dq_packed_width(%packed: memref<2x16x2xbf16>, %keys: memref<16x48xbf16>, %acc: memref<2x64xf32>) {
  // expected-error @+1 {{acc width}}
  smla.dq_packed %packed, %keys into %acc : memref<2x16x2xbf16>, memref<16x48xbf16>, memref<2x64xf32>
  return
}

// -----

func.func @cluster_init_global(%bars: memref<2xi64>) {
  // expected-error @+1 {{bars must be a static, non-empty array in workgroup memory}}
  smla.cluster_init %bars : memref<2xi64>
  return
}

// -----

func.func @cluster_init_dynamic(%bars: memref<?xi64, #gpu.address_space<workgroup>>) {
  // expected-error @+1 {{bars must be a static, non-empty array in workgroup memory}}
  smla.cluster_init %bars : memref<?xi64, #gpu.address_space<workgroup>>
  return
}
