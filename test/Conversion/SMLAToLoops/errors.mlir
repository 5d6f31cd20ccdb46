// RUN: smla-opt %s --smla-lower-to-loops -verify-diagnostics

func.func @whole(%q: memref<?x4x48xbf16>, %kv: memref<?x1x48xbf16>, %o: memref<?x4x32xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x48xf32>, %acc: memref<?x1x48xf32>) {
  // expected-error @+1 {{must be decomposed (smla-decompose) before lowering to loops}}
  smla.sparse_attention_bwd q(%q : memref<?x4x48xbf16>) kv(%kv : memref<?x1x48xbf16>) o(%o : memref<?x4x32xbf16>) dout(%o : memref<?x4x32xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x48xf32>) dkv_accum(%acc : memref<?x1x48xf32>) {config = #smla.config<d = 32, dt = 16, heads = 4, groups = 1, block = 16, lseBase = base2, positions = false, dqType = f32, dkvType = f32>, sm_scale = 1.0 : f32}
  return
}
