// RUN: smla-opt --smla-gpu-kernels %s | FileCheck %s
// RUN: smla-opt --smla-guarded --smla-gpu-map="mma=false" --smla-allocate-smem --smla-lower-to-nvvm="mma=false" %s | FileCheck %s --check-prefix=SHARED

// The non-finite row guard (counters[3]) on the GPU: each thread flags the
// values it stores as !(|v| < inf), as stored (bf16 widened back); one
// bar.red.or per CTA; only if it fired does the CTA re-read its rows, one
// thread per row, and add 1 per bad row.

// The bwd kernel with its dQ accumulator in registers (mma.sync form):
// each value is flagged where it is stored, into a private flag (a
// register once promoted) cleared before the stores.
// CHECK-LABEL: gpu.func @counted_bwd
// CHECK-SAME: smla.params = ["q", "kv", "o", "do", "indices", "lse", "dq", "dkv_accum", "counters", "T", "S_kv", "K", "sm_scale", "walk_period"]
// CHECK: %[[FLAGVAR:[0-9]+]] = llvm.alloca %{{.*}} x i32 {alignment = 4 : i64} : (i32) -> !llvm.ptr
// CHECK: %[[DQ:reinterpret_cast[_0-9]*]] = memref.reinterpret_cast %arg6 {{.*}} to memref<?x4x96xbf16>
// CHECK: %[[CNT:reinterpret_cast[_0-9]*]] = memref.reinterpret_cast %arg8 {{.*}} to memref<4xi64>
// CHECK: llvm.store %{{.*}}, %[[FLAGVAR]] : i32, !llvm.ptr
// CHECK: scf.if
// CHECK:   %[[T:[0-9]+]] = arith.truncf %{{[0-9]+}} : vector<2xf32> to vector<2xbf16>
// CHECK:   vector.store %[[T]], %[[DQ]][{{.*}}] : memref<?x4x96xbf16>, vector<2xbf16>
// CHECK:   %[[E:[0-9]+]] = vector.extract %[[T]][1] : bf16 from vector<2xbf16>
// CHECK:   %[[W:[0-9]+]] = arith.extf %[[E]] : bf16 to f32
// CHECK:   %[[A:[0-9]+]] = math.absf %[[W]] : f32
// CHECK:   %[[FIN:[0-9]+]] = arith.cmpf olt, %[[A]], %{{.*}} : f32
// CHECK:   %[[NOT:[0-9]+]] = arith.xori %[[FIN]], %{{.*}} : i1
// CHECK:   %[[BIT:[0-9]+]] = arith.extui %{{[0-9]+}} : i1 to i32
// CHECK:   %[[OLD:[0-9]+]] = llvm.load %[[FLAGVAR]] : !llvm.ptr -> i32
// CHECK:   %[[NEW:[0-9]+]] = arith.ori %[[OLD]], %[[BIT]] : i32
// CHECK:   llvm.store %[[NEW]], %[[FLAGVAR]] : i32, !llvm.ptr
// The flag, read once after the stores, into the barrier's OR.
// CHECK: %[[ANY:[0-9]+]] = nvvm.barrier #nvvm.reduction<or> %{{[0-9]+}} -> i32
// CHECK: %[[FIRED:[0-9]+]] = arith.cmpi ne, %[[ANY]], %{{.*}} : i32
// CHECK: scf.if %[[FIRED]] {
// CHECK:   scf.for %[[ROW:arg[0-9]+]] = %thread_id_x to %{{.*}} step %{{.*}} {
// CHECK:     %[[BAD:[0-9]+]] = scf.for {{.*}} iter_args(%{{.*}} = %false) -> (i1) {
// CHECK:       memref.load %[[DQ]][%block_id_x, %{{[0-9]+}}, %{{.*}}] : memref<?x4x96xbf16>
// CHECK:       math.absf
// CHECK:     %[[PTR:.*]] = memref.extract_aligned_pointer_as_index %[[CNT]]
// CHECK:     %[[PRESENT:[0-9]+]] = arith.cmpi ne, %[[PTR]], %{{.*}} : index
// CHECK:     %[[COUNT:[0-9]+]] = arith.andi %[[BAD]], %[[PRESENT]] : i1
// CHECK:     scf.if %[[COUNT]] {
// CHECK:       %[[C3:.*]] = arith.constant 3 : index
// CHECK:       memref.atomic_rmw addi %{{.*}}, %[[CNT]][%[[C3]]] : (i64, memref<4xi64>) -> i64
// CHECK: gpu.return
// The cast kernel takes the counters and flags the bf16 values it stores.
// CHECK-LABEL: gpu.func @counted_dkv_cast
// CHECK-SAME: smla.params = ["dkv_accum", "dkv", "counters", "S_kv"]
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %false) -> (i1) {
// CHECK:   %[[T:[0-9]+]] = arith.truncf %{{[0-9]+}} : vector<4xf32> to vector<4xbf16>
// CHECK:   vector.store %[[T]]
// CHECK:   vector.extract %[[T]][3] : bf16 from vector<4xbf16>
// CHECK:   arith.cmpf olt
// CHECK: nvvm.barrier #nvvm.reduction<or>
// CHECK: scf.if
// CHECK:   memref.load %{{.*}} : memref<1x2x96xbf16, strided<[192, 96, 1], offset: ?>>
// CHECK:   memref.atomic_rmw addi %{{.*}}[%c3] : (i64, memref<4xi64>) -> i64
// An f32 dkv: the cast kernel only reads the accumulator and counts.
// CHECK-LABEL: gpu.func @counted_f32_dkv_cast
// CHECK-SAME: smla.params = ["dkv_accum", "counters", "S_kv"]
// CHECK-NOT: vector.store
// CHECK-NOT: arith.truncf
// CHECK: nvvm.barrier #nvvm.reduction<or>
// CHECK: memref.atomic_rmw addi %{{.*}}[%c3] : (i64, memref<4xi64>) -> i64
// CHECK: gpu.return

// The dQ accumulator in shared memory (the CUDA-core form): the store loop
// carries the flag.
// SHARED-LABEL: gpu.func @counted_bwd
// SHARED: %[[FLAG:[0-9]+]] = scf.for %{{.*}} = %thread_id_x to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %false) -> (i1) {
// SHARED:   %[[T:[0-9]+]] = arith.truncf %{{[0-9]+}} : vector<4xf32> to vector<4xbf16>
// SHARED:   vector.store %[[T]], %{{.*}} : memref<?x4x96xbf16>, vector<4xbf16>
// SHARED:   vector.extract %[[T]][0] : bf16 from vector<4xbf16>
// SHARED: %[[P:[0-9]+]] = arith.extui %[[FLAG]] : i1 to i32
// SHARED: nvvm.barrier #nvvm.reduction<or> %[[P]] -> i32
// SHARED: memref.atomic_rmw addi %{{.*}}[%c3] : (i64, memref<4xi64>) -> i64
// SHARED: gpu.return

func.func @counted(%q: memref<?x4x96xbf16>, %kv: memref<?x2x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x2x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x2x96xf32>, %dkv: memref<?x2x96xbf16>, %counters: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x2x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x2x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x2x96xf32>) dkv(%dkv : memref<?x2x96xbf16>) counters(%counters : memref<4xi64>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 2, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}

func.func @counted_f32(%q: memref<?x4x96xbf16>, %kv: memref<?x2x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x2x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xf32>, %dkv_accum: memref<?x2x96xf32>, %counters: memref<4xi64>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x2x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x2x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xf32>) dkv_accum(%dkv_accum : memref<?x2x96xf32>) counters(%counters : memref<4xi64>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 2, block = 16, lseBase = natural, positions = false, dqType = f32, dkvType = f32>, sm_scale = 0.102 : f32}
  return
}
