// The GLM-5.2 per-rank sparse-MLA backward as a user states it: 16 heads,
// q/k width 512 + 64, v width 512, one kv group, base-2 lse (TileLang/Slime
// forward), absolute query positions for context parallelism, bf16 outputs
// and guard counters. T, S_kv and top-k are run-time sizes.
//
//   smla-opt --smla-guarded examples/glm52_bwd.mlir   # guarded tile IR
//   smla-opt --smla-cpu examples/glm52_bwd.mlir       # LLVM dialect for the CPU

func.func @glm52_sparse_mla_bwd(
    %q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>,
    %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>,
    %indices: memref<?x1x?xi32>, %lse: memref<?x16xf32>,
    %positions: memref<?xi32>, %dq: memref<?x16x576xbf16>,
    %dkv_accum: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>,
    %counters: memref<4xi64>) attributes {llvm.emit_c_interface} {
  smla.sparse_attention_bwd
      q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>)
      o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>)
      indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>)
      positions(%positions : memref<?xi32>)
      dq(%dq : memref<?x16x576xbf16>)
      dkv_accum(%dkv_accum : memref<?x1x576xf32>)
      dkv(%dkv : memref<?x1x576xbf16>)
      counters(%counters : memref<4xi64>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1,
                             block = 64, lseBase = base2, positions = true,
                             dqType = bf16, dkvType = bf16>,
       sm_scale = 0.0416666679 : f32}
  return
}
