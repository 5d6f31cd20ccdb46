// Malformed input gets a diagnostic and a non-zero exit, never a crash
// (`not` fails on a crash).
// RUN: split-file %s %t
// RUN: not smla-opt %t/unknown-op.mlir 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not smla-opt %t/missing-keyword.mlir 2>&1 | FileCheck %s --check-prefix=KEYWORD
// RUN: not smla-opt %t/missing-config.mlir 2>&1 | FileCheck %s --check-prefix=CONFIG
// RUN: not smla-opt %t/bad-attr.mlir 2>&1 | FileCheck %s --check-prefix=ATTR
// RUN: not smla-opt %t/truncated.mlir 2>&1 | FileCheck %s --check-prefix=TRUNC
// RUN: not smla-opt --smla-guarded %t/bad-config-in-pipeline.mlir 2>&1 | FileCheck %s --check-prefix=PIPE

//--- unknown-op.mlir
// UNKNOWN: error: custom op 'smla.backward' is unknown
func.func @f() {
  smla.backward
  return
}

//--- missing-keyword.mlir
// KEYWORD: error: custom op 'smla.sparse_attention_bwd' expected 'q'
func.func @f(%q: memref<?x16x576xbf16>) {
  smla.sparse_attention_bwd (%q : memref<?x16x576xbf16>)
  return
}

//--- missing-config.mlir
// CONFIG: error: 'smla.sparse_attention_bwd' op requires attribute 'config'
func.func @f(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %i: memref<?x1x?xi32>, %l: memref<?x16xf32>, %a: memref<?x1x576xf32>) {
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%o : memref<?x16x512xbf16>) indices(%i : memref<?x1x?xi32>) lse(%l : memref<?x16xf32>) dq(%q : memref<?x16x576xbf16>) dkv_accum(%a : memref<?x1x576xf32>) {sm_scale = 1.0 : f32}
  return
}

//--- bad-attr.mlir
// ATTR: error: expected integer value
func.func private @f() attributes {c = #smla.config<d = many, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}

//--- truncated.mlir
// TRUNC: error:
func.func @f(%q: memref<?x16x576xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(

//--- bad-config-in-pipeline.mlir
// PIPE: error: heads (16) must be divisible by groups (3)
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 16, groups = 3, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}
