// The named pipeline on the shipped GLM-5.2 example.
// RUN: smla-opt --smla-guarded %smla_src_root/examples/glm52_bwd.mlir | FileCheck %s
// Running the guard passes again on guarded IR changes nothing.
// RUN: smla-opt --smla-guarded %smla_src_root/examples/glm52_bwd.mlir > %t.once
// RUN: smla-opt --smla-insert-index-masks --smla-insert-softmax-guards --smla-verify-guards %t.once > %t.twice
// RUN: diff %t.once %t.twice

// CHECK-LABEL: func.func @glm52_sparse_mla_bwd
// CHECK-NOT: smla.sparse_attention_bwd
// CHECK: %[[LIVE:.*]] = smla.row_live {{.*}} -> vector<16xi1>
// CHECK: smla.index_load {{.*}} limit
// CHECK: %[[MK:.*]] = smla.index_mask {{.*}} limit {{.*}} counters
// CHECK: smla.gather {{.*}} mask(%[[MK]] : vector<64xi1>)
// CHECK: smla.softmax {{.*}} mask(%[[MK]] : vector<64xi1>) live(%[[LIVE]] : vector<16xi1>) {{.*}}clamp = 3.200000e+01
// CHECK: %[[MD:.*]] = smla.index_mask {{.*}} limit
// CHECK: smla.scatter_dkv {{.*}} mask(%[[MD]] : vector<64xi1>)
// CHECK: smla.store_dq
// CHECK: smla.cast_dkv
