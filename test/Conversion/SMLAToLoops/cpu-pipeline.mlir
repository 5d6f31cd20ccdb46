// The whole CPU pipeline on the shipped GLM-5.2 example: guarded, verified,
// lowered to loops, verified again, and down to the LLVM dialect.
// RUN: smla-opt --smla-cpu %smla_src_root/examples/glm52_bwd.mlir | FileCheck %s

// CHECK: llvm.func @glm52_sparse_mla_bwd
// CHECK: llvm.intr.masked.load
// CHECK: llvm.intr.exp2
// CHECK: llvm.select
// CHECK: llvm.func @_mlir_ciface_glm52_sparse_mla_bwd
// CHECK-NOT: smla.
// CHECK-NOT: scf.
