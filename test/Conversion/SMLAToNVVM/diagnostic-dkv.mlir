// RUN: smla-opt --smla-gpu-kernels %s | FileCheck %s --check-prefix=REAL
// RUN: smla-opt --smla-gpu-kernels --smla-diagnostic-dkv=no-reductions %s | FileCheck %s --check-prefix=NORED
// RUN: smla-opt --smla-gpu-kernels --smla-diagnostic-dkv=no-scatter %s | FileCheck %s --check-prefix=NOSCATTER

// --smla-diagnostic-dkv builds the measurement libraries behind the bounds
// in docs/performance.md (their dkv is wrong): every dKV reduction's
// predicate is ANDed with a false that the compilers cannot fold
// (%clock == 0x7fffffff: the products stay) or with one that ptxas folds
// (0 == 1: the products go too). By default nothing is added.

// REAL-LABEL: gpu.func @one_bwd
// REAL-NOT: %clock
// REAL-NOT: mov.u32 $0, 0;
// REAL: red.global.add.v4.f32
// REAL: gpu.return

// NORED-LABEL: gpu.func @one_bwd
// NORED: %[[CLK:.*]] = llvm.inline_asm has_side_effects asm_dialect = att "mov.u32 $0, %clock;", "=r"
// NORED: %[[NEVER:.*]] = arith.cmpi eq, %[[CLK]], %c2147483647_i32
// NORED: %[[P:.*]] = arith.andi %{{.*}}, %[[NEVER]]
// NORED: llvm.inline_asm has_side_effects asm_dialect = att "@$5 red.global.add.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,b" %{{.*}}, %[[P]]

// NOSCATTER-LABEL: gpu.func @one_bwd
// NOSCATTER: %[[ZERO:.*]] = llvm.inline_asm has_side_effects asm_dialect = att "mov.u32 $0, 0;", "=r"
// NOSCATTER: %[[NEVER:.*]] = arith.cmpi eq, %[[ZERO]], %c1_i32
// NOSCATTER: %[[P:.*]] = arith.andi %{{.*}}, %[[NEVER]]
// NOSCATTER: "@$5 red.global.add.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,b" %{{.*}}, %[[P]]
func.func @one(%q: memref<?x4x48xbf16>, %kv: memref<?x1x48xbf16>,
               %o: memref<?x4x32xbf16>, %do: memref<?x4x32xbf16>,
               %idx: memref<?x1x?xi32>, %lse: memref<?x4xf32>,
               %dq: memref<?x4x48xf32>, %acc: memref<?x1x48xf32>,
               %dkv: memref<?x1x48xbf16>, %cnt: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x48xbf16>)
      kv(%kv : memref<?x1x48xbf16>) o(%o : memref<?x4x32xbf16>)
      dout(%do : memref<?x4x32xbf16>) indices(%idx : memref<?x1x?xi32>)
      lse(%lse : memref<?x4xf32>)
      dq(%dq : memref<?x4x48xf32>) dkv_accum(%acc : memref<?x1x48xf32>)
      dkv(%dkv : memref<?x1x48xbf16>) counters(%cnt : memref<4xi64>)
      {config = #smla.config<d = 32, dt = 16, heads = 4, groups = 1,
          block = 16, lseBase = base2, positions = false, dqType = f32,
          dkvType = bf16>, sm_scale = 0.125 : f32}
  return
}
