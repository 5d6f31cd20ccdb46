// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512" %s | FileCheck %s --check-prefix=PLAN
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512" --smla-allocate-smem --smla-lower-to-nvvm %s | FileCheck %s
// RUN: smla-opt --smla-guarded --smla-gpu-map="threads=512" %s | sed 's/smla.dq_registers = 1 /smla.dq_registers = 2 /' | not smla-opt --smla-allocate-smem --smla-lower-to-nvvm 2>&1 | FileCheck %s --check-prefix=SLOTS

// The register form of the dQ accumulator with two m tiles (32 heads in
// one CTA, 16 warps): warp w keeps m tile w % 2 and column pair w / 2 (6
// pairs of 16 columns for 96 columns, 8 warps per m tile: one slot).

// PLAN-LABEL: gpu.func @regs_bwd
// PLAN: memref.alloca() {smla.dq_registers = 1 : i64} : memref<32x104xf32, #gpu.address_space<workgroup>>

// The accumulator has no shared memory: key tile 16 x 104 bf16 (3328),
// two f32 tiles 32 x 16 (2048 each), delta (128), staged q 32 x 104 bf16
// (6656) and do 32 x 72 bf16 (4608); 32 x 104 f32 (13312) more without
// the register form.
// CHECK-LABEL: gpu.func @regs_bwd
// CHECK-SAME: smla.dynamic_smem = 18816
// CHECK-NOT: smla.dq_registers
// CHECK: %[[REGS:[0-9]+]] = llvm.alloca %c8_i32 x f32 {alignment = 16 : i64} : (i32) -> !llvm.ptr
// The zero fill stores constants at constant indices. After the softmax,
// dq_accumulate: the warp's m tile (w % 2) and column pair (w / 2, of 6).
// CHECK: llvm.store %{{.*}} : f32, !llvm.ptr
// CHECK: math.exp2
// CHECK: %[[MT:[0-9]+]] = arith.remui %[[W:[0-9]+]], %c2{{.*}} : index
// CHECK-NEXT: %{{.*}} = arith.constant 2 : index
// CHECK-NEXT: %[[NP:[0-9]+]] = arith.divui %[[W]], %c2{{.*}} : index
// CHECK: arith.cmpi ult, %[[NP]], %c6{{.*}} : index

// A mark whose column pairs do not match the op is refused, not followed.
// SLOTS: error: 'memref.alloca' op is a dQ accumulator planned in registers (smla.dq_registers), but its column pairs per warp do not match the op's

func.func @regs(%q: memref<?x32x96xbf16>, %kv: memref<?x1x96xbf16>, %o: memref<?x32x64xbf16>, %dout: memref<?x32x64xbf16>, %indices: memref<?x1x?xi32>, %lse: memref<?x32xf32>, %dq: memref<?x32x96xbf16>, %dkv_accum: memref<?x1x96xf32>, %dkv: memref<?x1x96xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x32x96xbf16>) kv(%kv : memref<?x1x96xbf16>) o(%o : memref<?x32x64xbf16>) dout(%dout : memref<?x32x64xbf16>) indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x32xf32>) dq(%dq : memref<?x32x96xbf16>) dkv_accum(%dkv_accum : memref<?x1x96xf32>) dkv(%dkv : memref<?x1x96xbf16>) {config = #smla.config<d = 64, dt = 32, heads = 32, groups = 1, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}
