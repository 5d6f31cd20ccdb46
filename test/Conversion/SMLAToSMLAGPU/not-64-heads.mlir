// RUN: not smla-opt --pass-pipeline='builtin.module(smla-guarded, smla-gpu-map{threads=384 stage-token-rows=false}, gpu.module(smla-schedule-warp-specialized))' %s 2>&1 | FileCheck %s

// A 16-head kernel has 16-row score tiles: the schedule's wgmma tiles need
// 64 heads per CTA, and the pass says so instead of scheduling it.
// CHECK: error: 'gpu.func' op cannot take the warp-specialized schedule: needs 64 heads per CTA and blocks of 64 keys, got 16 and 64

func.func @h16_bwd(
    %q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>,
    %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>,
    %indices: memref<?x1x?xi32>, %lse: memref<?x16xf32>,
    %dq: memref<?x16x576xbf16>,
    %dkv_accum: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  smla.sparse_attention_bwd
      q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>)
      o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>)
      indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>)
      dq(%dq : memref<?x16x576xbf16>)
      dkv_accum(%dkv_accum : memref<?x1x576xf32>)
      dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1,
                             block = 64, lseBase = base2, positions = false,
                             dqType = bf16, dkvType = bf16>,
       sm_scale = 0.0416666679 : f32}
  return
}
