// RUN: smla-opt --pass-pipeline='builtin.module(gpu.module(smla-gpu-to-nvvm))' %s | FileCheck %s

// The roles become one branch per warpgroup, chosen by a warp-uniform
// warpgroup index; each branch first moves its register budget
// (setmaxnreg: the producer down to 24, the consumers up to 240) and
// restores the even split (65536 / 384 rounded down to 8: 168) before the
// code after the roles. A pipeline of one stage is two mbarriers (full,
// empty) initialised by thread 0 before a CTA barrier: the full barrier
// counts each producer thread twice (its copies' cp.async arrive and its
// own arrive), the empty one each consumer thread once. Use u of the
// pipeline waits on phase parity (u / stages) % 2; the producer waits on
// the empty barrier's opposite parity, so its first acquire passes.

// CHECK-LABEL: gpu.func @roles
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[FIRST:.*]] = arith.cmpi ult, %[[TID]], %c1
// CHECK: scf.if %[[FIRST]] {
// CHECK: nvvm.mbarrier.init %{{.*}}, %c256_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c256_i32
// CHECK: }
// CHECK-NEXT: gpu.barrier
// CHECK: %[[WG:.*]] = arith.divui %{{.*}}, %c128
// CHECK: %[[WGI:.*]] = arith.index_cast %[[WG]] : index to i32
// CHECK: %[[UNIFORM:.*]], %{{.*}} = gpu.shuffle idx %[[WGI]], %c0_i32, %c32_i32
// CHECK: %[[IS_PRODUCER:.*]] = arith.cmpi eq, %[[UNIFORM]], %c0_i32
// CHECK: scf.if %[[IS_PRODUCER]] {
// CHECK-NEXT: nvvm.setmaxregister decrease 24
// producer_acquire: the empty barrier (index 1), parity ^ 1.
// CHECK: %[[PAR:.*]] = arith.xori %{{.*}}, %c1_i32
// CHECK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}} %{{.*}}, %[[PAR]]
// producer_commit of async copies: the copies' arrive, then the thread's.
// CHECK: nvvm.cp.async.mbarrier.arrive %[[FULL:.*]] {noinc = true}
// CHECK: fence.proxy.async.shared::cta
// CHECK: nvvm.mbarrier.arrive %[[FULL]]
// CHECK: nvvm.setmaxregister increase 168
// CHECK: } else {
// CHECK: scf.if
// CHECK-NEXT: nvvm.setmaxregister increase 240
// consumer_wait: the full barrier, then a proxy fence so that generic
// reads and wgmma see the async copies' writes.
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK: fence.proxy.async.shared::cta
// consumer_release: one arrive on the empty barrier.
// CHECK: nvvm.mbarrier.arrive
// CHECK: nvvm.setmaxregister decrease 168
// CHECK: } else {
// CHECK-NEXT: nvvm.setmaxregister increase 240
// thread_in_warpgroup, then count: a per-thread sum of the predicate,
// one 64-bit atomic add when it is nonzero and the counters exist.
// CHECK: %[[T:.*]] = gpu.thread_id x
// CHECK: arith.remui %[[T]], %c128
// CHECK-COUNT-32: arith.extui
// CHECK: %[[PTR:.*]] = memref.extract_aligned_pointer_as_index %arg0
// CHECK: %[[HAVE:.*]] = arith.cmpi ne, %[[PTR]], %c0
// CHECK: %[[NZ:.*]] = arith.cmpi ne, %{{.*}}, %c0_i32
// CHECK: %[[GO:.*]] = arith.andi %[[NZ]], %[[HAVE]]
// CHECK: scf.if %[[GO]] {
// CHECK: memref.atomic_rmw addi %{{.*}}, %arg0[%c2]
// CHECK: nvvm.setmaxregister decrease 168
// CHECK-NOT: smla_gpu.
gpu.module @m {
  gpu.func @roles(%cnt: memref<4xi64>) kernel
      attributes {known_block_size = array<i32: 384, 1, 1>} {
    %bars = memref.alloca() {alignment = 8 : i64} : memref<2xi64, #gpu.address_space<workgroup>>
    %p = smla_gpu.pipeline_create %bars {async_copies} : memref<2xi64, #gpu.address_space<workgroup>> -> !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    %c5 = arith.constant 5 : index
    smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"] registers [24, 240, 240] {
      smla_gpu.producer_acquire %p[%c5] : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
      smla_gpu.producer_commit %p[%c5] : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    }, {
      smla_gpu.consumer_wait %p[%c5] : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
      smla_gpu.consumer_release %p[%c5] : !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    }, {
      %t = smla_gpu.thread_in_warpgroup : index
      %ti = arith.index_cast %t : index to i64
      %v = vector.broadcast %ti : i64 to vector<32xi64>
      %z = arith.constant dense<0> : vector<32xi64>
      %ok = arith.cmpi eq, %v, %z : vector<32xi64>
      smla_gpu.count %ok into %cnt[2] : vector<32xi1>, memref<4xi64>
    }
    gpu.return
  }
}
