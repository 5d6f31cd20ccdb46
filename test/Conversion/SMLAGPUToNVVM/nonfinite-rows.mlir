// RUN: smla-opt --pass-pipeline='builtin.module(gpu.module(smla-gpu-to-nvvm))' %s | FileCheck %s

// count_nonfinite_rows after the roles: every store_rows of the kernel ORs
// "a stored value is NaN or Inf" (after rounding to dq's type, so an
// overflow to bf16 Inf counts) into one per-thread flag, allocated and
// cleared at the kernel's entry. After the roles one CTA barrier ORs the
// flags; only if one is set are the CTA's 64 dq rows read back, and each
// row with a non-finite value adds 1 to counters[3] (nonfinite_rows), once
// whichever roles stored its columns. Without that op the pass leaves the
// stores uninstrumented (roles-and-pipelines.mlir).

// CHECK-LABEL: gpu.func @nonfinite
// CHECK: %[[FLAG:.*]] = llvm.alloca %{{.*}} x i32
// CHECK: llvm.store %c0_i32, %[[FLAG]]
// One role's store: round, test, OR into the flag, store.
// CHECK: %[[BF:.*]] = arith.truncf %{{.*}} : vector<2xf32> to vector<2xbf16>
// CHECK: math.absf
// CHECK: arith.cmpf olt
// CHECK: %[[OLD:.*]] = llvm.load %[[FLAG]]
// CHECK: %[[NEW:.*]] = arith.ori %[[OLD]], %{{.*}} : i32
// CHECK: llvm.store %[[NEW]], %[[FLAG]]
// CHECK: vector.store %[[BF]], %arg0[%arg2, %{{.*}}, %{{.*}}] : memref<?x64x128xbf16>, vector<2xbf16>
// The softmax role's end, then the dkv role's (its stores instrumented too).
// CHECK: nvvm.setmaxregister decrease 168
// CHECK: llvm.store %{{.*}}, %[[FLAG]]
// CHECK: nvvm.setmaxregister decrease 168
// After the roles.
// CHECK: %[[MINE:.*]] = llvm.load %[[FLAG]]
// CHECK: %[[SET:.*]] = arith.cmpi ne, %[[MINE]], %c0_i32
// CHECK: %[[BIT:.*]] = arith.extui %[[SET]] : i1 to i32
// CHECK: %[[ANY:.*]] = nvvm.barrier #nvvm.reduction<or> %[[BIT]] -> i32
// CHECK: %[[GO:.*]] = arith.cmpi ne, %[[ANY]], %c0_i32
// CHECK: scf.if %[[GO]] {
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %c64 step %c384 {
// CHECK: scf.for %[[COL:.*]] = %c0 to %c128 step %c1 iter_args
// CHECK: memref.load %arg0[%arg2, %{{.*}}, %[[COL]]] : memref<?x64x128xbf16>
// CHECK: memref.atomic_rmw addi %c1_i64, %arg1[%c3]
// CHECK-NOT: smla_gpu.
gpu.module @m {
  gpu.func @nonfinite(%dq: memref<?x64x128xbf16>, %cnt: memref<4xi64>, %t: index) kernel
      attributes {known_block_size = array<i32: 384, 1, 1>} {
    %c0 = arith.constant 0 : index
    smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"] registers [24, 240, 240] {
      %x = smla_gpu.thread_in_warpgroup : index
    }, {
      %z = arith.constant dense<0.0> : vector<32xf32>
      smla_gpu.store_rows %z into %dq[%t, %c0] {col = 0 : i64} : vector<32xf32>, memref<?x64x128xbf16>
    }, {
      %z = arith.constant dense<1.0> : vector<32xf32>
      smla_gpu.store_rows %z into %dq[%t, %c0] {col = 64 : i64} : vector<32xf32>, memref<?x64x128xbf16>
    }
    smla_gpu.count_nonfinite_rows %dq[%t, %c0] into %cnt : memref<?x64x128xbf16>, memref<4xi64>
    gpu.return
  }
}
