// RUN: not smla-opt --split-input-file --pass-pipeline='builtin.module(gpu.module(smla-gpu-to-nvvm))' %s 2>&1 | FileCheck %s

// A gather outside a warp_specialize has no role whose lanes it reads: the
// pass refuses it instead of leaving it unlowered.
// CHECK: error: 'smla_gpu.gather_keys' op was not lowered
gpu.module @m {
  gpu.func @outside(%kv: memref<?x1x128xbf16>, %idx: vector<64xi32>,
                    %mask: vector<64xi1>, %g: index) kernel
      attributes {known_block_size = array<i32: 384, 1, 1>} {
    %keys = memref.alloca() {alignment = 1024 : i64} : memref<64x128xbf16, #gpu.address_space<workgroup>>
    smla_gpu.gather_keys %kv[%idx] group(%g) mask(%mask : vector<64xi1>) into %keys : memref<?x1x128xbf16>, vector<64xi32>, memref<64x128xbf16, #gpu.address_space<workgroup>>
    gpu.return
  }
}

// -----

// Inside a role, the mask must be an index_mask of that role: a mask from
// elsewhere has no per-thread lanes to gather by.
// CHECK: error: 'smla_gpu.gather_keys' op reads lanes of no index or mask op of its role
gpu.module @m {
  gpu.func @foreign_mask(%kv: memref<?x1x128xbf16>, %idx: vector<64xi32>,
                         %mask: vector<64xi1>, %g: index) kernel
      attributes {known_block_size = array<i32: 384, 1, 1>} {
    %keys = memref.alloca() {alignment = 1024 : i64} : memref<64x128xbf16, #gpu.address_space<workgroup>>
    smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"] registers [24, 240, 240] {
      smla_gpu.gather_keys %kv[%idx] group(%g) mask(%mask : vector<64xi1>) into %keys : memref<?x1x128xbf16>, vector<64xi32>, memref<64x128xbf16, #gpu.address_space<workgroup>>
    }, {
      %t1 = smla_gpu.thread_in_warpgroup : index
    }, {
      %t2 = smla_gpu.thread_in_warpgroup : index
    }
    gpu.return
  }
}
