// RUN: smla-opt %s --smla-insert-index-masks -verify-diagnostics

// Indices of unknown origin cannot be masked: the pass fails loudly.
func.func @foreign(%kv: memref<?x1x48xbf16>, %i: vector<16xi32>, %t: index) {
  %keys = memref.alloca() : memref<16x48xbf16>
  // expected-error @+1 {{indices must come from smla.index_load to be masked}}
  smla.gather %kv[%t] rows(%i) into %keys
      : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}
