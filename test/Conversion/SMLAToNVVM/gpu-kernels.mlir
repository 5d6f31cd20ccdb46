// RUN: smla-opt --smla-gpu-kernels %s | FileCheck %s
// RUN: smla-opt --smla-guarded --smla-gpu-map="mma=false" --smla-allocate-smem --smla-lower-to-nvvm="mma=false" %s | FileCheck %s --check-prefix=SCALAR
// RUN: smla-opt --smla-guarded --smla-gpu-map %s | FileCheck %s --check-prefix=PLAN
// RUN: not smla-opt --smla-guarded --smla-gpu-map --smla-allocate-smem --smla-lower-to-nvvm="mma=false" %s 2>&1 | FileCheck %s --check-prefix=MISMATCH

// The guarded tile IR mapped onto kernels: every cp.async reads from
// select(mask, idx, 0) with a source count select(mask, 8, 0); every exp2 is
// fed by a clamp and consumed by the (mask && live) select; every
// red.global.add.v4.f32 is predicated by the mask that also zeroes its row.

// CHECK: gpu.module @smla_kernels
// CHECK: memref.global "public" @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
// sm_scale is an f32 parameter, not a constant: the op's
// `sm_scale = 0.102` is only a placeholder. walk_period (i32, last) rotates
// the block walk (block-walk.mlir).
// CHECK-LABEL: gpu.func @small_bwd
// CHECK-SAME: %arg10: i32, %[[SCALE:arg11]]: f32, %arg12: i32) kernel
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// The key tile is 16 x (96 + 8) bf16 (rows padded by 16 bytes), two 2 x 16
// f32 tiles (scores then P, dP then dS), and the head block's 2 q rows
// (2 x 104 bf16) and do rows (2 x 72 bf16) are staged; the dQ accumulator
// (2 x (96 + 8) f32, 896 bytes with alignment) is in registers and has no
// shared memory (the SCALAR run below gives it its bytes back).
// CHECK-SAME: smla.ctas_per_sm = 1
// CHECK-SAME: smla.dynamic_smem = 4608
// CHECK-SAME: smla.grid = ["T", "2", "1"], smla.kind = "bwd"
// CHECK-SAME: smla.params = ["q", "kv", "o", "do", "indices", "lse", "dq", "dkv_accum", "T", "S_kv", "K", "sm_scale", "walk_period"]
// CHECK-NOT: 1.020000e-01
// The dQ accumulator in registers (one m tile, 256 threads at one CTA per
// SM): each warp's C fragments of its column pair (6 pairs of 16 columns,
// at most one per warp) in a private array of 8 f32 that every access
// indexes by a constant, zeroed where the accumulator is filled.
// CHECK: %[[DQR:[0-9]+]] = llvm.alloca %c8_i32 x f32 {alignment = 16 : i64} : (i32) -> !llvm.ptr
// CHECK: %[[Z0:[0-9]+]] = llvm.getelementptr %[[DQR]][0] : (!llvm.ptr) -> !llvm.ptr, f32
// CHECK-NEXT: llvm.store %{{.*}}, %[[Z0]] : f32, !llvm.ptr
// The key gather is split (prefetch-keys.mlir): step 0 issues its own
// copies, every step waits for them; the copies themselves are checked in
// step 0's issue.
// CHECK: scf.for %[[J:arg[0-9]+]] = %c0{{.*}} to
// CHECK: %[[FIRST:[0-9]+]] = arith.cmpi eq, %[[J]], %c0{{.*}} : index
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK: %[[SAFE:[0-9]+]] = arith.select %[[M:[0-9]+]], %{{[0-9]+}}, %c0_i32{{.*}} : i32
// CHECK: %[[ROW:[0-9]+]] = arith.index_cast %[[SAFE]] : i32 to index
// CHECK: %[[N:[0-9]+]] = arith.select %[[M]], %c8{{.*}}, %c0{{.*}} : index
// The index lane and its mask are evaluated once per key row; a team of 8
// threads then copies the row's 12 chunks of 16 bytes, with no index load.
// CHECK: scf.for %{{.*}} = %{{[0-9]+}} to %c12{{.*}} step %c8{{.*}} {
// CHECK-NOT: memref.load
// CHECK: nvgpu.device_async_copy %{{.*}}[%[[ROW]], %block_id_y, %{{[0-9]+}}], %view[%arg{{[0-9]+}}, %{{[0-9]+}}], 8, %[[N]] {bypassL1} : memref<?x2x96xbf16> to memref<16x104xbf16, #gpu.address_space<workgroup>>
// CHECK: nvgpu.device_async_create_group
// CHECK-NOT: device_async_wait
// CHECK: nvvm.cp.async.wait.group 0
// CHECK-NEXT: gpu.barrier
// The scores/dP phase has 2 (m tile, n8 tile) items for 8 warps: a
// branch on warp < 2, not a loop.
// CHECK: %[[W:[0-9]+]] = arith.cmpi ult, %{{[0-9]+}}, %c2{{.*}} : index
// CHECK-NEXT: scf.if %[[W]] {
// Padded head rows (>= Hg = 2) are never stored.
// CHECK: %[[OK:[0-9]+]] = arith.cmpi ult, %{{[0-9]+}}, %c2{{.*}} : index
// Scores and dP on tensor cores in one pass over the key tile: per k step,
// one key fragment (one ldmatrix.x2 from shared memory) feeds the q.k mma
// and the do.v mma (q and do fragments by ldmatrix.x4 from the head block's
// rows, staged in shared memory); then the rope columns of q alone.
// CHECK: scf.for {{.*}} iter_args
// CHECK: %[[BF:[0-9]+]] = nvvm.ldmatrix %{{[0-9]+}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<row>, num = 2 : i32, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32)>
// CHECK-NEXT: %[[B0:[0-9]+]] = llvm.extractvalue %[[BF]][0]
// CHECK-NEXT: %[[B1:[0-9]+]] = llvm.extractvalue %[[BF]][1]
// CHECK-NOT: !llvm.ptr<1>
// CHECK: nvvm.ldmatrix %{{[0-9]+}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<row>, num = 4 : i32, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32, i32, i32)>
// CHECK: nvvm.mma.sync A[{{.*}}] B[%[[B0]], %[[B1]]] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>}
// CHECK-NOT: !llvm.ptr<1>
// CHECK: nvvm.ldmatrix %{{[0-9]+}} {{.*}} num = 4 : i32{{.*}} : (!llvm.ptr<3>)
// CHECK: nvvm.mma.sync A[{{.*}}] B[%[[B0]], %[[B1]]]
// CHECK: scf.yield {{.*}} : f32, f32, f32, f32, f32, f32, f32, f32
// CHECK: scf.for {{.*}} iter_args
// CHECK: nvvm.mma.sync
// CHECK: scf.yield {{.*}} : f32, f32, f32, f32
// CHECK: scf.if %[[OK]] {
// CHECK: vector.store
// CHECK: gpu.barrier
// x2 = s * (sm_scale * log2e) - lse2, clamped by a constant.
// CHECK: %[[K:[0-9]+]] = arith.mulf %[[SCALE]], %{{.*}} : f32
// CHECK: %[[S:[0-9]+]] = arith.mulf %{{[0-9]+}}, %[[K]] : f32
// CHECK: %[[X2:[0-9]+]] = arith.subf %[[S]], %{{[0-9]+}} : f32
// CHECK: %[[XC:[0-9]+]] = arith.minimumf %[[X2]], %{{.*}} : f32
// CHECK-NEXT: %[[E:[0-9]+]] = math.exp2 %[[XC]] : f32
// CHECK: arith.select %{{[0-9]+}}, %[[E]], %{{.*}} : f32
// dS = p * (dp - delta) * sm_scale
// CHECK: %[[D:[0-9]+]] = arith.subf
// CHECK: %[[PD:[0-9]+]] = arith.mulf %{{[0-9]+}}, %[[D]] : f32
// CHECK: arith.mulf %[[PD]], %[[SCALE]] : f32
// dQ on tensor cores: dS rounded to bf16 pairs, keys by ldmatrix.trans;
// C comes from the private array and goes back to it (not to shared
// memory) for warps with a column pair (warp < 6).
// CHECK: arith.truncf %{{[0-9]+}} : vector<2xf32> to vector<2xbf16>
// CHECK: %[[HAS:[0-9]+]] = arith.cmpi ult, %{{[0-9]+}}, %c6{{.*}} : index
// CHECK-NEXT: scf.if %[[HAS]] {
// CHECK: %[[C0:[0-9]+]] = llvm.getelementptr %[[DQR]][0] : (!llvm.ptr) -> !llvm.ptr, f32
// CHECK-NEXT: llvm.load %[[C0]] : !llvm.ptr -> f32
// CHECK: nvvm.ldmatrix %{{[0-9]+}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>}
// CHECK: nvvm.mma.sync
// CHECK: nvvm.mma.sync
// CHECK-NOT: vector.store
// CHECK: %[[C7:[0-9]+]] = llvm.getelementptr %[[DQR]][7] : (!llvm.ptr) -> !llvm.ptr, f32
// CHECK-NEXT: llvm.store %{{.*}}, %[[C7]] : f32, !llvm.ptr
// dKV on tensor cores: A = dS^T (and P^T) transposed out of the shared f32
// tiles while packing to bf16 pairs; B = 32-bit pairs of the staged q rows,
// low halves for the even columns (one prmt, selector 0x5410) and high
// halves for the odd ones (0x7632).
// CHECK: memref.load %view_{{[0-9]+}}[%{{[0-9]+}}, %{{[0-9]+}}] : memref<2x16xf32, #gpu.address_space<workgroup>>
// CHECK: arith.truncf %{{[0-9]+}} : vector<2xf32> to vector<2xbf16>
// CHECK: scf.for
// CHECK: llvm.load %{{[0-9]+}} {alignment = 4 : i64} : !llvm.ptr<3> -> i32
// CHECK: nvvm.prmt <default> %c21520_i32
// CHECK: nvvm.prmt <default> %c21520_i32
// CHECK: nvvm.mma.sync
// CHECK: nvvm.prmt <default> %c30258_i32
// CHECK: nvvm.prmt <default> %c30258_i32
// CHECK: nvvm.mma.sync
// Columns < D add P^T . dO.
// CHECK: scf.if
// CHECK: nvvm.mma.sync
// CHECK: nvvm.mma.sync
// CHECK: arith.select %[[SM:[0-9]+]], %{{[0-9]+}}, %c0_i32{{.*}} : i32
// CHECK-NEXT: arith.index_cast
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att "@$5 red.global.add.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,b" %{{.*}}, %[[SM]] : (!llvm.ptr<1>, f32, f32, f32, f32, i1) -> ()
// CHECK-LABEL: gpu.func @small_dkv_zero
// CHECK-SAME: smla.kind = "dkv_zero"
// CHECK-LABEL: gpu.func @small_dkv_cast
// CHECK-SAME: smla.kind = "dkv_cast"
func.func @small(%q: memref<?x4x96xbf16>, %kv: memref<?x2x96xbf16>, %o: memref<?x4x64xbf16>, %dout: memref<?x4x64xbf16>, %indices: memref<?x2x?xi32>, %lse: memref<?x4xf32>, %dq: memref<?x4x96xbf16>, %dkv_accum: memref<?x2x96xf32>, %dkv: memref<?x2x96xbf16>) {
  smla.sparse_attention_bwd q(%q : memref<?x4x96xbf16>) kv(%kv : memref<?x2x96xbf16>) o(%o : memref<?x4x64xbf16>) dout(%dout : memref<?x4x64xbf16>) indices(%indices : memref<?x2x?xi32>) lse(%lse : memref<?x4xf32>) dq(%dq : memref<?x4x96xbf16>) dkv_accum(%dkv_accum : memref<?x2x96xf32>) dkv(%dkv : memref<?x2x96xbf16>) {config = #smla.config<d = 64, dt = 32, heads = 4, groups = 2, block = 16, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.102 : f32}
  return
}

// The CUDA-core fallback (mma=false) uses no tensor cores.
// smla-gpu-map plans the dQ accumulator in registers (1 column pair per
// warp: 6 pairs, 8 warps) and smla-allocate-smem gives its alloca no
// bytes; planned so, the CUDA-core lowering refuses it instead of reading
// shared memory that is not there. Mapped for the CUDA cores, it keeps
// its 896 bytes.
// PLAN: memref.alloca() {smla.dq_registers = 1 : i64} : memref<2x104xf32, #gpu.address_space<workgroup>>
// MISMATCH: error: 'memref.alloca' op is a dQ accumulator planned in registers (smla.dq_registers), which needs the mma lowering
// SCALAR-LABEL: gpu.func @small_bwd
// SCALAR-SAME: smla.dynamic_smem = 5504
// SCALAR-NOT: nvvm.mma.sync
// SCALAR-NOT: nvvm.ldmatrix
// SCALAR: vector.fma
// SCALAR-LABEL: gpu.func @small_dkv_zero
