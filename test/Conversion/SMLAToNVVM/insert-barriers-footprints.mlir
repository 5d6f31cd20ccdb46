// RUN: smla-opt --smla-insert-barriers -split-input-file %s | FileCheck %s

// Footprints are byte ranges of the shared-memory buffer, not SSA values:
// two views of the same bytes conflict, views of disjoint bytes do not.

!wg = memref<4x16xf32, #gpu.address_space<workgroup>>
!raw = memref<8192xi8, #gpu.address_space<workgroup>>
gpu.module @m {
  memref.global "public" @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
  // CHECK-LABEL: gpu.func @alias
  // A write, then a read of the same bytes through another view: barrier.
  // CHECK: linalg.fill
  // CHECK-NEXT: gpu.barrier
  // CHECK-NEXT: smla.store_dq %[[B:.*]] into
  // Reads of other bytes, and a second read, need none.
  // CHECK-NOT: gpu.barrier
  // CHECK: smla.store_dq
  // CHECK-NOT: gpu.barrier
  // CHECK: smla.store_dq
  // A write over bytes read since the last barrier (WAR): barrier.
  // CHECK-NEXT: gpu.barrier
  // CHECK-NEXT: linalg.fill
  // CHECK-NOT: gpu.barrier
  // CHECK: gpu.return
  gpu.func @alias(%dq: memref<?x4x16xf32>, %t: index, %h: index) kernel {
    %g = memref.get_global @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
    %raw = memref.reinterpret_cast %g to offset: [0], sizes: [8192], strides: [1] : memref<0xi8, #gpu.address_space<workgroup>> to !raw
    %c0 = arith.constant 0 : index
    %c4096 = arith.constant 4096 : index
    %zero = arith.constant 0.0 : f32
    %a = memref.view %raw[%c0][] : !raw to !wg
    %b = memref.view %raw[%c0][] : !raw to !wg
    %c = memref.view %raw[%c4096][] : !raw to !wg
    linalg.fill ins(%zero : f32) outs(%a : !wg)
    smla.store_dq %b into %dq[%t, %h] : !wg, memref<?x4x16xf32>
    smla.store_dq %c into %dq[%t, %h] : !wg, memref<?x4x16xf32>
    smla.store_dq %a into %dq[%t, %h] : !wg, memref<?x4x16xf32>
    linalg.fill ins(%zero : f32) outs(%b : !wg)
    gpu.return
  }
}

// -----

// P written by softmax and read by dscores stays in one thread (both visit
// element (h, j) with flat index h * 16 + j): no barrier between them. The
// same read of P after a linalg.fill wrote it crosses threads: barrier.

!wg = memref<4x16xf32, #gpu.address_space<workgroup>>
!raw = memref<8192xi8, #gpu.address_space<workgroup>>
gpu.module @m {
  memref.global "public" @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
  // CHECK-LABEL: gpu.func @same_thread
  // CHECK: smla.softmax
  // CHECK-NEXT: smla.dscores
  // CHECK-NEXT: gpu.barrier
  // CHECK-NEXT: linalg.fill
  // CHECK-NEXT: gpu.barrier
  // CHECK-NEXT: smla.dscores
  // CHECK-NEXT: gpu.return
  gpu.func @same_thread(%lse: memref<?x4xf32>, %t: index, %h: index) kernel {
    %g = memref.get_global @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
    %raw = memref.reinterpret_cast %g to offset: [0], sizes: [8192], strides: [1] : memref<0xi8, #gpu.address_space<workgroup>> to !raw
    %c0 = arith.constant 0 : index
    %c1024 = arith.constant 1024 : index
    %c2048 = arith.constant 2048 : index
    %c3072 = arith.constant 3072 : index
    %c5120 = arith.constant 5120 : index
    %zero = arith.constant 0.0 : f32
    %s = memref.view %raw[%c0][] : !raw to !wg
    %p = memref.view %raw[%c1024][] : !raw to !wg
    %dp = memref.view %raw[%c2048][] : !raw to !wg
    %ds = memref.view %raw[%c3072][] : !raw to !wg
    %delta = memref.view %raw[%c5120][] : !raw to memref<4xf32, #gpu.address_space<workgroup>>
    smla.softmax %s, %lse[%t, %h] into %p {base = #smla<lse_base base2>, scale = 1.0 : f32} : !wg, memref<?x4xf32>, !wg
    smla.dscores %p, %dp, %delta into %ds {scale = 1.0 : f32} : !wg, !wg, memref<4xf32, #gpu.address_space<workgroup>>, !wg
    linalg.fill ins(%zero : f32) outs(%p : !wg)
    smla.dscores %p, %dp, %delta into %ds {scale = 1.0 : f32} : !wg, !wg, memref<4xf32, #gpu.address_space<workgroup>>, !wg
    gpu.return
  }
}
