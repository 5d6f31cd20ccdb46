// RUN: smla-opt %s --smla-insert-softmax-guards -verify-diagnostics

// Without the index masks there is no mask to give the softmax: the pass
// says which pass must run first.
func.func @unmasked(%kv: memref<?x1x48xbf16>, %idxs: memref<?x1x?xi32>,
                    %q: memref<?x4x48xbf16>, %lse: memref<?x4xf32>,
                    %t: index) {
  %keys = memref.alloca() : memref<16x48xbf16>
  %s = memref.alloca() : memref<4x16xf32>
  %i = smla.index_load %idxs[%t, %t, %t] : memref<?x1x?xi32> -> vector<16xi32>
  smla.gather %kv[%t] rows(%i) into %keys
      : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  smla.tile_dot %q[%t, %t], %keys into %s
      : memref<?x4x48xbf16>, memref<16x48xbf16>, memref<4x16xf32>
  // expected-error @+1 {{cannot find the index mask of the keys its scores come from; run smla-insert-index-masks first}}
  smla.softmax %s, %lse[%t, %t] into %s
      {base = #smla<lse_base base2>, scale = 1.0 : f32}
      : memref<4x16xf32>, memref<?x4xf32>, memref<4x16xf32>
  return
}
