// RUN: smla-opt %s -split-input-file --smla-verify-guards -verify-diagnostics

// Hand-written IR that the guard verifier must refuse, one case per rule.

func.func @no_mask(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
// expected-error @+1 {{'smla.gather' op is an unguarded gather: has no index mask}}
  smla.gather %kv[%g] rows(%i) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @foreign_mask(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
// expected-error @+1 {{is an unguarded gather: mask is not produced by smla.index_mask}}
  smla.gather %kv[%g] rows(%i) mask(%vm : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @other_block(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  %i2 = smla.index_load %idxs[%t, %g, %c16] : memref<?x1x?xi32> -> vector<16xi32>
// expected-error @+1 {{is an unguarded gather: mask was built from a different index block}}
  smla.gather %kv[%g] rows(%i2) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @other_tensor(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  %S2 = memref.dim %other, %c0 : memref<?x1x48xbf16>
  %m2 = smla.index_mask %i below %S2 lanes %n : vector<16xi32> -> vector<16xi1>
// expected-error @+1 {{is an unguarded gather: mask bound is not dim 0 of the tensor this op accesses}}
  smla.gather %kv[%g] rows(%i) mask(%m2 : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @no_tail(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  %m2 = smla.index_mask %i below %S lanes %c16 : vector<16xi32> -> vector<16xi1>
// expected-error @+1 {{is an unguarded gather: mask lane count is not min(K - offset, block) of its index block}}
  smla.gather %kv[%g] rows(%i) mask(%m2 : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @limit_ignored(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  %il = smla.index_load %idxs[%t, %g, %k0] limit %pos : memref<?x1x?xi32> -> vector<16xi32>
  %ml = smla.index_mask %il below %S lanes %n : vector<16xi32> -> vector<16xi1>
// expected-error @+1 {{is an unguarded gather: mask ignores the position limit of its indices}}
  smla.gather %kv[%g] rows(%il) mask(%ml : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @scatter_kv_bound(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  %ds = memref.alloca() : memref<4x16xf32>
// expected-error @+1 {{'smla.scatter_dkv' op is an unguarded scatter: mask bound is not dim 0 of the tensor this op accesses}}
  smla.scatter_dkv %ds, %ds, %q, %q[%t, %g] rows(%i) mask(%m : vector<16xi1>) into %acc[%g] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x48xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @no_clamp(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  smla.gather %kv[%g] rows(%i) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
  %live = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<4xi1>
// expected-error @+1 {{'smla.softmax' op is an unguarded exponential: has no clamp}}
  smla.softmax %s, %lse[%t, %g] mask(%m : vector<16xi1>) live(%live : vector<4xi1>) into %s {base = #smla<lse_base base2>, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @no_live(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  smla.gather %kv[%g] rows(%i) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
// expected-error @+1 {{is an unguarded exponential: has no live-row guard}}
  smla.softmax %s, %lse[%t, %g] mask(%m : vector<16xi1>) into %s {base = #smla<lse_base base2>, clamp = 32.0 : f32, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @live_other_row(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  smla.gather %kv[%g] rows(%i) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
  %live = smla.row_live %lse[%g, %t] : memref<?x4xf32> -> vector<4xi1>
// expected-error @+1 {{is an unguarded exponential: live rows were computed for a different lse row}}
  smla.softmax %s, %lse[%t, %g] mask(%m : vector<16xi1>) live(%live : vector<4xi1>) into %s {base = #smla<lse_base base2>, clamp = 32.0 : f32, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @live_foreign(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  smla.gather %kv[%g] rows(%i) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
  %lv = arith.constant dense<true> : vector<4xi1>
// expected-error @+1 {{is an unguarded exponential: live rows are not produced by smla.row_live}}
  smla.softmax %s, %lse[%t, %g] mask(%m : vector<16xi1>) live(%lv : vector<4xi1>) into %s {base = #smla<lse_base base2>, clamp = 32.0 : f32, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

func.func @wrong_mask(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %other: memref<?x1x48xbf16>, %t: index, %g: index, %k0: index, %pos: i32, %vm: vector<16xi1>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  smla.gather %kv[%g] rows(%i) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
  %live = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<4xi1>
// expected-error @+1 {{is an unguarded exponential: its mask is not the mask of the keys its scores come from}}
  smla.softmax %s, %lse[%t, %g] mask(%vm : vector<16xi1>) live(%live : vector<4xi1>) into %s {base = #smla<lse_base base2>, clamp = 32.0 : f32, scale = 1.0 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}

// -----

// The index block must be the one of the accessed (token, group) ...
func.func @other_group(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %t: index, %g: index, %h: index, %k0: index) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  // expected-error @+1 {{is an unguarded gather: indices were loaded for a different token or group}}
  smla.gather %kv[%h] rows(%i) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @other_token(%acc: memref<?x1x48xf32>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %t: index, %u: index, %g: index, %k0: index) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %ds = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %acc, %c0 : memref<?x1x48xf32>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  // expected-error @+1 {{is an unguarded scatter: indices were loaded for a different token or group}}
  smla.scatter_dkv %ds, %ds, %q, %q[%u, %g] rows(%i) mask(%m : vector<16xi1>) into %acc[%g] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x48xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

// ... and its position limit must be positions[token].
func.func @limit_not_position(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %t: index, %g: index, %k0: index, %pos: i32) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %i = smla.index_load %idxs[%t, %g, %k0] limit %pos : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n limit %pos : vector<16xi32> -> vector<16xi1>
  // expected-error @+1 {{is an unguarded gather: the position limit of its indices is not positions[token]}}
  smla.gather %kv[%g] rows(%i) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

func.func @whole(%q: memref<?x4x48xbf16>, %kv: memref<?x1x48xbf16>, %o: memref<?x4x32xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x48xf32>, %acc: memref<?x1x48xf32>) {
  // expected-error @+1 {{has no guards; decompose it and insert guards (smla-guarded pipeline) first}}
  smla.sparse_attention_bwd q(%q : memref<?x4x48xbf16>) kv(%kv : memref<?x1x48xbf16>) o(%o : memref<?x4x32xbf16>) dout(%o : memref<?x4x32xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x48xf32>) dkv_accum(%acc : memref<?x1x48xf32>) {config = #smla.config<d = 32, dt = 16, heads = 4, groups = 1, block = 16, lseBase = base2, positions = false, dqType = f32, dkvType = f32>, sm_scale = 1.0 : f32}
  return
}

// -----

// Lowered IR: every exponential must read a clamped exponent ...
func.func @exp_unclamped(%x: f32, %ok: i1) -> f32 {
  %zero = arith.constant 0.0 : f32
  // expected-error @+1 {{'math.exp2' op is an unguarded exponential: its exponent is not clamped by a constant <= 64}}
  %e = math.exp2 %x : f32
  %p = arith.select %ok, %e, %zero : f32
  return %p : f32
}

// -----

func.func @exp_clamp_too_large(%x: f32, %ok: i1) -> f32 {
  %zero = arith.constant 0.0 : f32
  %big = arith.constant 100.0 : f32
  %xc = arith.minimumf %x, %big : f32
  // expected-error @+1 {{its exponent is not clamped by a constant <= 64}}
  %e = math.exp2 %xc : f32
  %p = arith.select %ok, %e, %zero : f32
  return %p : f32
}

// -----

// ... and be consumed only as the chosen value of a select.
func.func @exp_unselected(%x: f32) -> f32 {
  %bound = arith.constant 32.0 : f32
  %xc = arith.minimumf %x, %bound : f32
  // expected-error @+1 {{'math.exp' op is an unguarded exponential: its result is used outside the true branch of an arith.select}}
  %e = math.exp %xc : f32
  %m = arith.mulf %e, %x : f32
  return %m : f32
}

// -----

func.func @exp_false_branch(%x: f32, %ok: i1) -> f32 {
  %bound = arith.constant 32.0 : f32
  %xc = arith.minimumf %x, %bound : f32
  // expected-error @+1 {{its result is used outside the true branch of an arith.select}}
  %e = math.exp2 %xc : f32
  %p = arith.select %ok, %x, %e : f32
  return %p : f32
}

// -----

// The select must choose exactly 0.0 when the guard is off.
func.func @exp_select_not_zero(%x: f32, %ok: i1) -> f32 {
  %one = arith.constant 1.0 : f32
  %bound = arith.constant 32.0 : f32
  %xc = arith.minimumf %x, %bound : f32
  // expected-error @+1 {{the select that consumes it does not choose 0.0 otherwise}}
  %e = math.exp2 %xc : f32
  %p = arith.select %ok, %e, %one : f32
  return %p : f32
}

// -----

func.func @exp_select_not_constant(%x: f32, %ok: i1) -> f32 {
  %bound = arith.constant 32.0 : f32
  %xc = arith.minimumf %x, %bound : f32
  // expected-error @+1 {{does not choose 0.0 otherwise}}
  %e = math.exp2 %xc : f32
  %p = arith.select %ok, %e, %x : f32
  return %p : f32
}

// -----

// A guarded exponential passes.
func.func @exp_guarded(%x: f32, %ok: i1) -> f32 {
  %zero = arith.constant 0.0 : f32
  %bound = arith.constant 32.0 : f32
  %xc = arith.minimumf %x, %bound : f32
  %e = math.exp2 %xc : f32
  %p = arith.select %ok, %e, %zero : f32
  return %p : f32
}

// Steps of two tokens (smla.index_pair): each rule again.

// -----

func.func @pair_swapped_softmax_masks(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %k0: index, %pos: memref<?xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %p = memref.alloca() : memref<4x16xf32>
  %live = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<4xi1>
  %ta = arith.muli %t, %c2 : index
  %tb = arith.addi %ta, %c1 : index
  %la = memref.load %pos[%ta] : memref<?xi32>
  %lb = memref.load %pos[%tb] : memref<?xi32>
  %ia = smla.index_load %idxs[%ta, %g, %k0] limit %la : memref<?x1x?xi32> -> vector<16xi32>
  %ib = smla.index_load %idxs[%tb, %g, %k0] limit %lb : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %D = memref.dim %acc, %c0 : memref<?x1x48xf32>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %ma = smla.index_mask %ia below %S lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %mb = smla.index_mask %ib below %S lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %u, %m, %keep = smla.index_pair %ia mask(%ma), %ib mask(%mb) : vector<16xi32>, vector<16xi1>
  %da = smla.index_mask %ia below %D lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %db = smla.index_mask %ib below %D lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %su, %sm, %skeep = smla.index_pair %ia mask(%da), %ib mask(%db) : vector<16xi32>, vector<16xi1>
  smla.gather %kv[%g] rows(%u) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
// expected-error @+1 {{is an unguarded exponential: its mask is not the mask of the keys its scores come from}}
  smla.softmax %s, %lse[%t, %g] mask(%mb : vector<16xi1>) pair_mask(%ma : vector<16xi1>) live(%live : vector<4xi1>) into %p {base = #smla<lse_base base2>, clamp = 3.200000e+01 : f32, scale = 1.250000e-01 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  smla.scatter_dkv %p, %p, %q, %do[%t, %g] rows(%su) mask(%sm : vector<16xi1>) into %acc[%g] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @pair_not_consecutive(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %k0: index, %pos: memref<?xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %p = memref.alloca() : memref<4x16xf32>
  %live = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<4xi1>
  %ta = arith.muli %t, %c2 : index
  %tb = arith.addi %ta, %c2 : index
  %la = memref.load %pos[%ta] : memref<?xi32>
  %lb = memref.load %pos[%tb] : memref<?xi32>
  %ia = smla.index_load %idxs[%ta, %g, %k0] limit %la : memref<?x1x?xi32> -> vector<16xi32>
  %ib = smla.index_load %idxs[%tb, %g, %k0] limit %lb : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %D = memref.dim %acc, %c0 : memref<?x1x48xf32>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %ma = smla.index_mask %ia below %S lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %mb = smla.index_mask %ib below %S lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %u, %m, %keep = smla.index_pair %ia mask(%ma), %ib mask(%mb) : vector<16xi32>, vector<16xi1>
  %da = smla.index_mask %ia below %D lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %db = smla.index_mask %ib below %D lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %su, %sm, %skeep = smla.index_pair %ia mask(%da), %ib mask(%db) : vector<16xi32>, vector<16xi1>
// expected-error @+1 {{is an unguarded gather: the index pair's rows are not consecutive tokens}}
  smla.gather %kv[%g] rows(%u) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
// expected-error @+1 {{is an unguarded exponential: the index pair's rows are not consecutive tokens}}
  smla.softmax %s, %lse[%t, %g] mask(%ma : vector<16xi1>) pair_mask(%keep : vector<16xi1>) live(%live : vector<4xi1>) into %p {base = #smla<lse_base base2>, clamp = 3.200000e+01 : f32, scale = 1.250000e-01 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
// expected-error @+1 {{is an unguarded scatter: the index pair's rows are not consecutive tokens}}
  smla.scatter_dkv %p, %p, %q, %do[%t, %g] rows(%su) mask(%sm : vector<16xi1>) into %acc[%g] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @pair_other_token(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %k0: index, %pos: memref<?xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %p = memref.alloca() : memref<4x16xf32>
  %live = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<4xi1>
  %ta = arith.muli %t, %c2 : index
  %tb = arith.addi %ta, %c1 : index
  %la = memref.load %pos[%ta] : memref<?xi32>
  %lb = memref.load %pos[%tb] : memref<?xi32>
  %ia = smla.index_load %idxs[%ta, %g, %k0] limit %la : memref<?x1x?xi32> -> vector<16xi32>
  %ib = smla.index_load %idxs[%tb, %g, %k0] limit %lb : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %D = memref.dim %acc, %c0 : memref<?x1x48xf32>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %ma = smla.index_mask %ia below %S lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %mb = smla.index_mask %ib below %S lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %u, %m, %keep = smla.index_pair %ia mask(%ma), %ib mask(%mb) : vector<16xi32>, vector<16xi1>
  %da = smla.index_mask %ia below %D lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %db = smla.index_mask %ib below %D lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %su, %sm, %skeep = smla.index_pair %ia mask(%da), %ib mask(%db) : vector<16xi32>, vector<16xi1>
  smla.gather %kv[%g] rows(%u) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
  smla.softmax %s, %lse[%t, %g] mask(%ma : vector<16xi1>) pair_mask(%keep : vector<16xi1>) live(%live : vector<4xi1>) into %p {base = #smla<lse_base base2>, clamp = 3.200000e+01 : f32, scale = 1.250000e-01 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
// expected-error @+1 {{is an unguarded scatter: the index pair's rows are not tokens 2t and 2t + 1 of its folded token t}}
  smla.scatter_dkv %p, %p, %q, %do[%k0, %g] rows(%su) mask(%sm : vector<16xi1>) into %acc[%g] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @pair_masks_of_kv(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %k0: index, %pos: memref<?xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %p = memref.alloca() : memref<4x16xf32>
  %live = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<4xi1>
  %ta = arith.muli %t, %c2 : index
  %tb = arith.addi %ta, %c1 : index
  %la = memref.load %pos[%ta] : memref<?xi32>
  %lb = memref.load %pos[%tb] : memref<?xi32>
  %ia = smla.index_load %idxs[%ta, %g, %k0] limit %la : memref<?x1x?xi32> -> vector<16xi32>
  %ib = smla.index_load %idxs[%tb, %g, %k0] limit %lb : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %D = memref.dim %acc, %c0 : memref<?x1x48xf32>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %ma = smla.index_mask %ia below %S lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %mb = smla.index_mask %ib below %S lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %u, %m, %keep = smla.index_pair %ia mask(%ma), %ib mask(%mb) : vector<16xi32>, vector<16xi1>
  %da = smla.index_mask %ia below %D lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %db = smla.index_mask %ib below %D lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %su, %sm, %skeep = smla.index_pair %ia mask(%ma), %ib mask(%mb) : vector<16xi32>, vector<16xi1>
  smla.gather %kv[%g] rows(%u) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
  smla.softmax %s, %lse[%t, %g] mask(%ma : vector<16xi1>) pair_mask(%keep : vector<16xi1>) live(%live : vector<4xi1>) into %p {base = #smla<lse_base base2>, clamp = 3.200000e+01 : f32, scale = 1.250000e-01 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
// expected-error @+1 {{is an unguarded scatter: in its index pair: mask bound is not dim 0 of the tensor this op accesses}}
  smla.scatter_dkv %p, %p, %q, %do[%t, %g] rows(%su) mask(%sm : vector<16xi1>) into %acc[%g] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @pair_ok(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %k0: index, %pos: memref<?xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %p = memref.alloca() : memref<4x16xf32>
  %live = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<4xi1>
  %ta = arith.muli %t, %c2 : index
  %tb = arith.addi %ta, %c1 : index
  %la = memref.load %pos[%ta] : memref<?xi32>
  %lb = memref.load %pos[%tb] : memref<?xi32>
  %ia = smla.index_load %idxs[%ta, %g, %k0] limit %la : memref<?x1x?xi32> -> vector<16xi32>
  %ib = smla.index_load %idxs[%tb, %g, %k0] limit %lb : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %D = memref.dim %acc, %c0 : memref<?x1x48xf32>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %ma = smla.index_mask %ia below %S lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %mb = smla.index_mask %ib below %S lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %u, %m, %keep = smla.index_pair %ia mask(%ma), %ib mask(%mb) : vector<16xi32>, vector<16xi1>
  %da = smla.index_mask %ia below %D lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %db = smla.index_mask %ib below %D lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %su, %sm, %skeep = smla.index_pair %ia mask(%da), %ib mask(%db) : vector<16xi32>, vector<16xi1>
  smla.gather %kv[%g] rows(%u) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
  smla.softmax %s, %lse[%t, %g] mask(%ma : vector<16xi1>) pair_mask(%keep : vector<16xi1>) live(%live : vector<4xi1>) into %p {base = #smla<lse_base base2>, clamp = 3.200000e+01 : f32, scale = 1.250000e-01 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  smla.scatter_dkv %p, %p, %q, %do[%t, %g] rows(%su) mask(%sm : vector<16xi1>) into %acc[%g] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @pair_raw_second_mask(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %k0: index, %pos: memref<?xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %p = memref.alloca() : memref<4x16xf32>
  %live = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<4xi1>
  %ta = arith.muli %t, %c2 : index
  %tb = arith.addi %ta, %c1 : index
  %la = memref.load %pos[%ta] : memref<?xi32>
  %lb = memref.load %pos[%tb] : memref<?xi32>
  %ia = smla.index_load %idxs[%ta, %g, %k0] limit %la : memref<?x1x?xi32> -> vector<16xi32>
  %ib = smla.index_load %idxs[%tb, %g, %k0] limit %lb : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %D = memref.dim %acc, %c0 : memref<?x1x48xf32>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %ma = smla.index_mask %ia below %S lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %mb = smla.index_mask %ib below %S lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %u, %m, %keep = smla.index_pair %ia mask(%ma), %ib mask(%mb) : vector<16xi32>, vector<16xi1>
  %da = smla.index_mask %ia below %D lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %db = smla.index_mask %ib below %D lanes %n limit %lb : vector<16xi32> -> vector<16xi1>
  %su, %sm, %skeep = smla.index_pair %ia mask(%da), %ib mask(%db) : vector<16xi32>, vector<16xi1>
  smla.gather %kv[%g] rows(%u) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
// expected-error @+1 {{is an unguarded exponential: its mask is not the mask of the keys its scores come from}}
  smla.softmax %s, %lse[%t, %g] mask(%ma : vector<16xi1>) pair_mask(%mb : vector<16xi1>) live(%live : vector<4xi1>) into %p {base = #smla<lse_base base2>, clamp = 3.200000e+01 : f32, scale = 1.250000e-01 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  smla.scatter_dkv %p, %p, %q, %do[%t, %g] rows(%su) mask(%sm : vector<16xi1>) into %acc[%g] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

func.func @pair_offsets(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %lse: memref<?x4xf32>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %k0: index, %pos: memref<?xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %p = memref.alloca() : memref<4x16xf32>
  %live = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<4xi1>
  %ta = arith.muli %t, %c2 : index
  %tb = arith.addi %ta, %c1 : index
  %la = memref.load %pos[%ta] : memref<?xi32>
  %lb = memref.load %pos[%tb] : memref<?xi32>
  %ia = smla.index_load %idxs[%ta, %g, %k0] limit %la : memref<?x1x?xi32> -> vector<16xi32>
  %k1 = arith.addi %k0, %c16 : index
  %ib = smla.index_load %idxs[%tb, %g, %k1] limit %lb : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %D = memref.dim %acc, %c0 : memref<?x1x48xf32>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %ma = smla.index_mask %ia below %S lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %left1 = arith.subi %K, %k1 : index
  %n1 = arith.minsi %left1, %c16 : index
  %mb = smla.index_mask %ib below %S lanes %n1 limit %lb : vector<16xi32> -> vector<16xi1>
  %u, %m, %keep = smla.index_pair %ia mask(%ma), %ib mask(%mb) : vector<16xi32>, vector<16xi1>
  %da = smla.index_mask %ia below %D lanes %n limit %la : vector<16xi32> -> vector<16xi1>
  %db = smla.index_mask %ib below %D lanes %n1 limit %lb : vector<16xi32> -> vector<16xi1>
  %su, %sm, %skeep = smla.index_pair %ia mask(%da), %ib mask(%db) : vector<16xi32>, vector<16xi1>
// expected-error @+1 {{is an unguarded gather: the index pair's blocks are at different offsets}}
  smla.gather %kv[%g] rows(%u) mask(%m : vector<16xi1>) into %keys : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %g], %keys into %s : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
// expected-error @+1 {{is an unguarded exponential: the index pair's blocks are at different offsets}}
  smla.softmax %s, %lse[%t, %g] mask(%ma : vector<16xi1>) pair_mask(%keep : vector<16xi1>) live(%live : vector<4xi1>) into %p {base = #smla<lse_base base2>, clamp = 3.200000e+01 : f32, scale = 1.250000e-01 : f32} : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
// expected-error @+1 {{is an unguarded scatter: the index pair's blocks are at different offsets}}
  smla.scatter_dkv %p, %p, %q, %do[%t, %g] rows(%su) mask(%sm : vector<16xi1>) into %acc[%g] : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

// A deferred scatter (smla-defer-scatter) is guarded where its slots are
// written: by a pack_dkv whose mask bounds its indices by the rows of the
// dkv the chunk reduces into.
func.func @packed_kv_bound(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %k0: index) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %ds = memref.alloca() : memref<4x16xf32>
  %packed = memref.alloca() : memref<2x16x4xbf16>
  %slots = memref.alloca() : memref<16xi32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %S = memref.dim %kv, %c0 : memref<?x1x48xbf16>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %S lanes %n : vector<16xi32> -> vector<16xi1>
  smla.pack_dkv %ds, %ds rows(%i) mask(%m : vector<16xi1>) into %packed, %slots : memref<4x16xf32>, vector<16xi32>, memref<2x16x4xbf16>, memref<16xi32>
// expected-error @+1 {{'smla.scatter_packed' op is an unguarded scatter: mask bound is not dim 0 of the tensor this op accesses}}
  smla.scatter_packed %packed, %slots, %q, %q[%t, %g] into %acc[%g] {chunk = 0 : i64, chunks = 3 : i64} : memref<2x16x4xbf16>, memref<16xi32>, memref<?x4x48xbf16>, memref<?x4x48xbf16>, memref<?x1x48xf32>
  return
}

// -----

func.func @packed_slots_overwritten(%idxs: memref<?x1x?xi32>, %q: memref<?x4x48xbf16>, %acc: memref<?x1x48xf32>, %t: index, %g: index, %k0: index) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %zero = arith.constant 0 : i32
  %ds = memref.alloca() : memref<4x16xf32>
  %packed = memref.alloca() : memref<2x16x4xbf16>
  %slots = memref.alloca() : memref<16xi32>
  %i = smla.index_load %idxs[%t, %g, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  %D = memref.dim %acc, %c0 : memref<?x1x48xf32>
  %K = memref.dim %idxs, %c2 : memref<?x1x?xi32>
  %left = arith.subi %K, %k0 : index
  %n = arith.minsi %left, %c16 : index
  %m = smla.index_mask %i below %D lanes %n : vector<16xi32> -> vector<16xi1>
  // Slot 0 would be a valid row for every masked lane.
  linalg.fill ins(%zero : i32) outs(%slots : memref<16xi32>)
  smla.pack_dkv %ds, %ds rows(%i) mask(%m : vector<16xi1>) into %packed, %slots : memref<4x16xf32>, vector<16xi32>, memref<2x16x4xbf16>, memref<16xi32>
// expected-error @+1 {{'smla.scatter_packed' op is an unguarded scatter: its slots are written by 'linalg.fill', not by a pack_dkv or a fill with -1}}
  smla.scatter_packed %packed, %slots, %q, %q[%t, %g] into %acc[%g] {chunk = 0 : i64, chunks = 3 : i64} : memref<2x16x4xbf16>, memref<16xi32>, memref<?x4x48xbf16>, memref<?x4x48xbf16>, memref<?x1x48xf32>
  return
}

// -----

func.func @packed_never_packed(%q: memref<?x4x48xbf16>, %acc: memref<?x1x48xf32>, %t: index, %g: index) {
  %packed = memref.alloca() : memref<2x16x4xbf16>
  %slots = memref.alloca() : memref<16xi32>
// expected-error @+1 {{'smla.scatter_packed' op is an unguarded scatter: no pack_dkv writes its slots}}
  smla.scatter_packed %packed, %slots, %q, %q[%t, %g] into %acc[%g] {chunk = 0 : i64, chunks = 3 : i64} : memref<2x16x4xbf16>, memref<16xi32>, memref<?x4x48xbf16>, memref<?x4x48xbf16>, memref<?x1x48xf32>
  return
}
