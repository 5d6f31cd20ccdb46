// RUN: smla-opt --pass-pipeline='builtin.module(smla-guarded, smla-gpu-map{threads=384 stage-token-rows=false}, gpu.module(smla-schedule-warp-specialized))' %s | FileCheck %s
// RUN: smla-opt --pass-pipeline='builtin.module(smla-guarded, smla-gpu-map{threads=384 stage-token-rows=false}, gpu.module(smla-schedule-warp-specialized{softmax-chunks=0 dkv-depth=2}))' %s | FileCheck %s --check-prefix=SPLIT
// RUN: not smla-opt --pass-pipeline='builtin.module(smla-guarded, smla-gpu-map{threads=256 stage-token-rows=false}, gpu.module(smla-schedule-warp-specialized))' %s 2>&1 | FileCheck %s --check-prefix=THREADS
// RUN: not smla-opt --pass-pipeline='builtin.module(smla-guarded, smla-gpu-map{threads=384 stage-token-rows=false}, gpu.module(smla-schedule-warp-specialized{dkv-depth=3}))' %s 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: smla-opt --pass-pipeline='builtin.module(smla-guarded, smla-gpu-map{threads=384 stage-token-rows=false}, gpu.module(smla-schedule-warp-specialized))' %s | FileCheck %s --check-prefix=LENGTHS

// A 64-head bwd kernel (q/k width 256 + 64, v width 256) as the block loop's
// three warpgroup roles. The producer stages q and do once, then per block
// of 64 keys writes the slots (index where the gather mask and the dKV
// mask hold, -1 elsewhere) and gathers the keys (zero-filled where the
// mask is false). The softmax role computes S and dP, P = exp2 of a
// clamped exponent selected by the mask, dS, publishes P^T and dS^T, its
// dQ columns [0, 256) and the last softmax-chunks dKV chunks; the dkv role
// the remaining dQ columns and the first dKV chunks. Every reduction goes
// through the slots, so a masked key adds nothing.

// CHECK-LABEL: gpu.func @ws_bwd_bwd
// CHECK-SAME: known_block_size = array<i32: 384, 1, 1>
// The pipelines: q/do rows and keys are async copies (128 producer
// threads, both 128-thread consumer warpgroups); P^T/dS^T is published
// by the softmax role's threads.
// CHECK: %[[ROWS:.*]] = smla_gpu.pipeline_create %{{.*}} {async_copies} : {{.*}} -> !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
// CHECK: %[[KEYS:.*]] = smla_gpu.pipeline_create %{{.*}} {async_copies}
// CHECK: %[[PDS:.*]] = smla_gpu.pipeline_create %{{.*}} : memref<2xi64
// CHECK: smla_gpu.warp_specialize roles ["producer", "softmax", "dkv"] registers [24, 240, 240] {
// Producer.
// CHECK: smla_gpu.load_rows %{{.*}} into %[[Q:alloca[_0-9]*]] : memref<?x64x320xbf16>
// CHECK: smla_gpu.load_rows %{{.*}} into %[[DO:alloca[_0-9]*]] : memref<?x64x256xbf16>
// CHECK: smla_gpu.producer_commit %[[ROWS]]
// CHECK: scf.for
// CHECK: %[[IDX:.*]] = smla.index_load
// CHECK: %[[GMASK:.*]] = smla.index_mask %[[IDX]] below
// CHECK: %[[DMASK:.*]] = smla.index_mask %[[IDX]] below
// CHECK: smla_gpu.producer_acquire %[[KEYS]]
// CHECK: smla_gpu.write_slots %[[IDX]] masks(%[[GMASK]], %[[DMASK]] : {{.*}}) into %[[SLOTS:alloca[_0-9]*]]
// CHECK: smla_gpu.gather_keys %{{.*}}[%[[IDX]]] group(%{{.*}}) mask(%[[GMASK]] : vector<64xi1>) into %[[KEY:alloca[_0-9]*]]
// CHECK: smla_gpu.producer_commit %[[KEYS]]
// CHECK: }, {
// Softmax role.
// CHECK: smla.delta
// CHECK: %[[LSE:.*]] = smla_gpu.fragment_rows %{{.*}} {n = 64 : i64} : memref<64xf32, strided<[1], offset: ?>> -> vector<32xf32>
// CHECK: smla_gpu.consumer_wait %[[ROWS]]
// CHECK: scf.for {{.*}} -> (vector<128xf32>)
// CHECK: smla_gpu.consumer_wait %[[KEYS]]
// CHECK: %[[S:.*]] = smla_gpu.wgmma a_tile(%[[Q]] : {{.*}}) b_tile(%[[KEY]] : {{.*}}) {{{.*}}k_extent = 320 : i64, n = 64 : i64}
// CHECK: %[[DP:.*]] = smla_gpu.wgmma a_tile(%[[DO]] : {{.*}}) b_tile(%[[KEY]] : {{.*}}) {{{.*}}k_extent = 256 : i64, n = 64 : i64}
// CHECK: %[[SD:.*]]:2 = smla_gpu.wgmma_wait 0, %[[S]], %[[DP]]
// CHECK: %[[COLSLOT:.*]] = smla_gpu.fragment_columns %[[SLOTS]] {n = 64 : i64}
// CHECK: %[[LIVE:.*]] = arith.cmpi sge, %[[COLSLOT]]
// CHECK: %[[MASK:.*]] = arith.andi %[[LIVE]]
// CHECK: %[[X:.*]] = arith.subf %{{.*}}, %[[LSE]]
// CHECK: %[[CLAMPED:.*]] = arith.minimumf %[[X]], %[[CAP:.*]] : vector<32xf32>
// CHECK: %[[E:.*]] = math.exp2 %[[CLAMPED]]
// CHECK: %[[P:.*]] = arith.select %[[MASK]], %[[E]], %{{.*}}
// CHECK: %[[OVER:.*]] = arith.cmpf ogt, %[[X]], %[[CAP]]
// CHECK: %[[COUNTED:.*]] = arith.andi %[[MASK]], %[[OVER]]
// CHECK: smla_gpu.count %[[COUNTED]] into %{{.*}}[2]
// CHECK: smla_gpu.producer_acquire %[[PDS]]
// CHECK: smla_gpu.store_fragment %[[P]] into %[[PT:alloca[_0-9]*]] {col = 0 : i64, row = 0 : i64, transpose}
// CHECK: smla_gpu.store_fragment %{{.*}} into %[[DST:alloca[_0-9]*]] {col = 0 : i64, row = 0 : i64, transpose}
// CHECK: smla_gpu.producer_commit %[[PDS]]
// dQ[:, 0:256] += dS K, dS from registers.
// CHECK: smla_gpu.wgmma a_regs(%{{.*}} : vector<16xi32>) b_tile(%[[KEY]] : {{.*}}) acc(%{{.*}} : vector<128xf32>) {{{.*}}b_major = "mn"{{.*}}n = 256 : i64}
// CHECK: %[[RSLOT:.*]] = smla_gpu.fragment_rows %[[SLOTS]] {n = 64 : i64} : {{.*}} -> vector<32xi32>
// CHECK: smla_gpu.consumer_release %[[KEYS]]
// The softmax role's dKV chunks: columns 128, 192 (q and do) and 256 (q only).
// CHECK: smla_gpu.wgmma a_tile(%[[DST]] {{.*}} b_tile(%[[Q]] {{.*}} b_col = 128
// CHECK: smla_gpu.wgmma a_tile(%[[PT]] {{.*}} b_tile(%[[DO]] {{.*}} b_col = 128
// CHECK: smla_gpu.reduce_dkv %{{.*}} slots(%[[RSLOT]] : vector<32xi32>) into %{{.*}} {col = 128 : i64}
// CHECK: smla_gpu.reduce_dkv %{{.*}} slots(%[[RSLOT]] : vector<32xi32>) into %{{.*}} {col = 192 : i64}
// CHECK-NOT: b_tile(%[[DO]]
// CHECK: smla_gpu.reduce_dkv %{{.*}} slots(%[[RSLOT]] : vector<32xi32>) into %{{.*}} {col = 256 : i64}
// CHECK: smla_gpu.consumer_release %[[PDS]]
// CHECK: smla_gpu.store_rows %{{.*}} into %{{.*}} {col = 0 : i64} : vector<128xf32>
// CHECK: }, {
// dkv role: dQ[:, 256:320] and the dKV chunks at columns 0 and 64.
// CHECK: smla_gpu.consumer_wait %[[PDS]]
// CHECK: smla_gpu.wgmma a_tile(%[[DST]] {{.*}}) b_tile(%[[KEY]] {{.*}}) acc({{.*}}) {a_col = 0 : i64, a_major = "mn", {{.*}}b_col = 256
// CHECK: smla_gpu.consumer_release %[[KEYS]]
// CHECK: smla_gpu.reduce_dkv {{.*}} {col = 0 : i64}
// CHECK: smla_gpu.reduce_dkv {{.*}} {col = 64 : i64}
// CHECK: smla_gpu.consumer_release %[[PDS]]
// CHECK: smla_gpu.store_rows %{{.*}} into %{{.*}} {col = 256 : i64} : vector<32xf32>
// CHECK: }
// The store_dq counters: rows of dQ that are not finite, after both roles
// stored theirs.
// CHECK: smla_gpu.count_nonfinite_rows %{{.*}} into %{{.*}} : memref<?x64x320xbf16>, memref<4xi64>
// CHECK-NOT: smla.sparse_attention_bwd
// CHECK-NOT: smla.softmax
// CHECK-NOT: smla.scatter_dkv
// CHECK-NOT: smla.store_dq

// softmax-chunks=0 leaves every dKV chunk to the dkv role; dkv-depth=2
// issues each next chunk's products before the current chunk's reduction
// (one product group, two wgmmas, still pending at each wait).
// SPLIT-LABEL: gpu.func @ws_bwd_bwd
// SPLIT: smla_gpu.warp_specialize
// SPLIT-NOT: smla_gpu.reduce_dkv
// SPLIT: }, {
// SPLIT: b_col = 0 : i64
// SPLIT: b_col = 64 : i64
// SPLIT: b_col = 64 : i64
// SPLIT: smla_gpu.wgmma_wait 2,
// SPLIT: smla_gpu.reduce_dkv {{.*}} {col = 0 : i64}
// SPLIT-COUNT-4: smla_gpu.reduce_dkv
// SPLIT-NOT: smla_gpu.reduce_dkv
// SPLIT-LABEL: gpu.func @ws_len_bwd

// THREADS: error: 'gpu.func' op cannot take the warp-specialized schedule: needs 384 threads (three warpgroups), got 256
// OPTION: error: smla-schedule-warp-specialized: softmax-chunks must be >= 0 and dkv-depth 1 or 2

func.func @ws_bwd(
    %q: memref<?x64x320xbf16>, %kv: memref<?x1x320xbf16>,
    %o: memref<?x64x256xbf16>, %do: memref<?x64x256xbf16>,
    %indices: memref<?x1x?xi32>, %lse: memref<?x64xf32>,
    %dq: memref<?x64x320xbf16>,
    %dkv_accum: memref<?x1x320xf32>, %dkv: memref<?x1x320xbf16>,
    %counters: memref<4xi64>) {
  smla.sparse_attention_bwd
      q(%q : memref<?x64x320xbf16>) kv(%kv : memref<?x1x320xbf16>)
      o(%o : memref<?x64x256xbf16>) dout(%do : memref<?x64x256xbf16>)
      indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x64xf32>)
      dq(%dq : memref<?x64x320xbf16>)
      dkv_accum(%dkv_accum : memref<?x1x320xf32>)
      dkv(%dkv : memref<?x1x320xbf16>)
      counters(%counters : memref<4xi64>)
      {config = #smla.config<d = 256, dt = 64, heads = 64, groups = 1,
                             block = 64, lseBase = base2, positions = false,
                             dqType = bf16, dkvType = bf16>,
       sm_scale = 0.0625 : f32}
  return
}

// With topk_length every role walks the token's own blocks (the
// producer's, the softmax role's and the dkv role's loops share one
// bound, ceil(n / 64) with n = min(K, max(0, length[t]))), and the
// softmax role's Delta takes the caller's where given.
// LENGTHS-LABEL: gpu.func @ws_len_bwd
// LENGTHS-SAME: smla.params = ["q", "kv", "o", "do", "indices", "lse", "dq", "dkv_accum", "counters", "delta", "topk_length", "T", "S_kv", "K", "sm_scale", "walk_period"]
// The roles' loops count in i32 (the bound cast once per role).
// LENGTHS: %[[N:.*]] = arith.minsi %{{.*}}, %{{.*}} : index
// LENGTHS: %[[NB:.*]] = arith.ceildivui %[[N]], %{{.*}} : index
// LENGTHS: smla_gpu.warp_specialize
// LENGTHS: %[[B0:.*]] = arith.index_cast %[[NB]] : index to i32
// LENGTHS: scf.for %{{.*}} = %{{.*}} to %[[B0]] step %{{.*}} : i32
// LENGTHS: smla.index_load %{{.*}} length %[[N]]
// LENGTHS: }, {
// LENGTHS: smla.delta %{{.*}} given(%{{.*}} : memref<?x64xf32>) into
// LENGTHS: %[[B1:.*]] = arith.index_cast %[[NB]] : index to i32
// LENGTHS: scf.for %{{.*}} = %{{.*}} to %[[B1]] step %{{.*}} : i32
// LENGTHS: }, {
// LENGTHS: %[[B2:.*]] = arith.index_cast %[[NB]] : index to i32
// LENGTHS: scf.for %{{.*}} = %{{.*}} to %[[B2]] step %{{.*}} : i32
func.func @ws_len(
    %q: memref<?x64x320xbf16>, %kv: memref<?x1x320xbf16>,
    %o: memref<?x64x256xbf16>, %do: memref<?x64x256xbf16>,
    %indices: memref<?x1x?xi32>, %lse: memref<?x64xf32>,
    %dq: memref<?x64x320xbf16>,
    %dkv_accum: memref<?x1x320xf32>, %dkv: memref<?x1x320xbf16>,
    %counters: memref<4xi64>, %delta: memref<?x64xf32>,
    %len: memref<?xi32>) {
  smla.sparse_attention_bwd
      q(%q : memref<?x64x320xbf16>) kv(%kv : memref<?x1x320xbf16>)
      o(%o : memref<?x64x256xbf16>) dout(%do : memref<?x64x256xbf16>)
      indices(%indices : memref<?x1x?xi32>) lse(%lse : memref<?x64xf32>)
      dq(%dq : memref<?x64x320xbf16>)
      dkv_accum(%dkv_accum : memref<?x1x320xf32>)
      dkv(%dkv : memref<?x1x320xbf16>)
      counters(%counters : memref<4xi64>) delta(%delta : memref<?x64xf32>)
      topk_length(%len : memref<?xi32>)
      {config = #smla.config<d = 256, dt = 64, heads = 64, groups = 1,
                             block = 64, lseBase = base2, positions = false,
                             dqType = bf16, dkvType = bf16>,
       sm_scale = 0.0625 : f32}
  return
}
