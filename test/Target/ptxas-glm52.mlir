// REQUIRES: ptxas
// RUN: rm -rf %t
// RUN: smla-compile -o %t --config d=512,dt=64,heads=16,groups=1,block=64,lse=base2,positions=1,dq=bf16,dkv=bf16 | FileCheck %s --check-prefix=USAGE
// RUN: FileCheck %s --check-prefix=PTX < %t/smla_d512_dt64_h16_g1_b64_base2_pos_bf16_bf16.ptx
// RUN: not grep -q ldmatrix.sync.aligned.m8n8.x2 %t/smla_d512_dt64_h16_g1_b64_base2_pos_bf16_bf16.ptx
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: not smla-compile -o %t --config heads=3,groups=2 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not smla-compile -o %t --config sm_scale=0.1 2>&1 | FileCheck %s --check-prefix=SCALE
// RUN: not smla-compile -o %t --config heads=16,head_blocks=3 2>&1 | FileCheck %s --check-prefix=SPLIT
// RUN: smla-compile -o %t/c1 -quiet --config d=512,dt=64,heads=16,groups=1,block=32,lse=base2,positions=1,dq=bf16,dkv=bf16
// RUN: smla-compile -o %t/c2 -quiet --ctas-per-sm 2 --config d=512,dt=64,heads=16,groups=1,block=32,lse=base2,positions=1,dq=bf16,dkv=bf16
// RUN: smla-compile -o %t/c3 -quiet --ctas-per-sm 3 --config d=512,dt=64,heads=16,groups=1,block=32,lse=base2,positions=1,dq=bf16,dkv=bf16
// RUN: FileCheck %s --check-prefix=C1 < %t/c1/manifest.json
// RUN: FileCheck %s --check-prefix=C2 < %t/c2/manifest.json
// RUN: FileCheck %s --check-prefix=C3 < %t/c3/manifest.json
// RUN: not grep minnctapersm %t/c2/smla_d512_dt64_h16_g1_b32_base2_pos_bf16_bf16.ptx
// RUN: smla-compile -o %t/c2r -quiet --config d=512,dt=64,heads=16,groups=1,block=32,lse=base2,positions=1,dq=bf16,dkv=bf16,threads=512,ctas_per_sm=2
// RUN: FileCheck %s --check-prefix=C2R < %t/c2r/smla_d512_dt64_h16_g1_b32_base2_pos_bf16_bf16.ptx
// RUN: FileCheck %s --check-prefix=C2R-REGS < %t/c2r/smla_d512_dt64_h16_g1_b32_base2_pos_bf16_bf16.ptxas.txt
// RUN: not smla-compile -o %t/bad -quiet --config heads=16,threads=100 2>&1 | FileCheck %s --check-prefix=THREADS
// RUN: not smla-compile -o %t/bad -quiet --config heads=16,threads=1024,ctas_per_sm=3 2>&1 | FileCheck %s --check-prefix=RESIDENT
// RUN: not smla-compile -o %t/c0 --ctas-per-sm 0 --config heads=16 2>&1 | FileCheck %s --check-prefix=C0
// RUN: smla-compile -o %t/h128 -quiet --config d=512,dt=64,heads=128,groups=1,block=64,lse=base2,positions=1,dq=bf16,dkv=bf16
// RUN: FileCheck %s --check-prefix=H128 < %t/h128/manifest.json
// RUN: FileCheck %s --check-prefix=H128-PTXAS < %t/h128/smla_d512_dt64_h128_g1_b64_s8_base2_pos_bf16_bf16.ptxas.txt
// RUN: smla-compile -o %t/h64 -quiet --cta-threads 512 --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16
// RUN: FileCheck %s --check-prefix=H64 < %t/h64/smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16.ptx
// RUN: FileCheck %s --check-prefix=H64-PTXAS < %t/h64/smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16.ptxas.txt
// RUN: FileCheck %s --check-prefix=H64-SMEM < %t/h64/manifest.json
// RUN: smla-compile -o %t/d960 -quiet --config d=960,dt=64,heads=16,groups=1,block=32,lse=base2,positions=1,dq=bf16,dkv=bf16,threads=256,ctas_per_sm=2
// RUN: FileCheck %s --check-prefix=D960 < %t/d960/smla_d960_dt64_h16_g1_b32_base2_pos_bf16_bf16.ptxas.txt
// RUN: smla-compile -o %t/auto -quiet --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0 --config d=64,dt=32,heads=34,groups=2,block=16 --config d=64,dt=32,heads=64,groups=1,block=16,head_blocks=4
// RUN: FileCheck %s --check-prefix=AUTO < %t/auto/manifest.json
// RUN: smla-compile -o %t/note --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0 2>&1 | FileCheck %s --check-prefix=NOTE
// RUN: smla-compile -o %t/h -quiet --config d=512,dt=64,heads=16,groups=1,block=64,lse=natural,positions=0,dq=bf16,dkv=bf16 --config d=512,dt=64,heads=32,groups=1,block=32,lse=base2,positions=1,dq=bf16,dkv=bf16 --config d=512,dt=64,heads=64,groups=1,block=32,lse=base2,positions=1,dq=bf16,dkv=bf16
// RUN: cat %t/h/*.ptxas.txt | FileCheck %s --check-prefix=SPILLS
// RUN: not grep -E "[1-9][0-9]* bytes spill" %t/h/smla_d512_dt64_h16_g1_b64_natural_bf16_bf16.ptxas.txt %t/h/smla_d512_dt64_h32_g1_b32_base2_pos_bf16_bf16.ptxas.txt %t/h/smla_d512_dt64_h64_g1_b32_s2_base2_pos_bf16_bf16.ptxas.txt
// RUN: cat %t/h/*.ptx | FileCheck %s --check-prefix=MMA
// RUN: smla-compile -o %t/wg -quiet --cta-threads 512 --config d=512,dt=64,heads=32,groups=1,block=64,tokens=2,lse=base2,positions=1,dq=bf16,dkv=bf16,scatter=wgmma
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {.*}, %rd[0-9]*, %rd[0-9]*, p, 1, 1, 0, 0;" %t/wg/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-N64
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {.*}, %rd[0-9]*, %rd[0-9]*, p, 1, 1, 0, 0;" %t/wg/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-N32
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {.*}, %rd[0-9]*, %rd[0-9]*, p, 1, 1, 1, 1;" %t/wg/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-DQ32
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {.*}, %rd[0-9]*, %rd[0-9]*, p, 1, 1, 1, 1;" %t/wg/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-DQ8
// RUN: not grep -c "ldmatrix\|mma.sync.aligned" %t/wg/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-NOSYNC
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16" %t/wg/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-N48
// RUN: smla-compile -o %t/b1 -quiet --cta-threads 512 --config d=512,dt=64,heads=64,groups=1,block=64,lse=natural,positions=1,dq=bf16,dkv=bf16,scatter=wgmma
// RUN: grep -c "wgmma.mma_async" %t/b1/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-ALL
// RUN: smla-compile -o %t/b1c -quiet --cta-threads 512 --config d=512,dt=64,heads=64,groups=1,block=64,lse=natural,positions=1,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1
// RUN: grep -c "wgmma.mma_async" %t/b1c/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-B1-ALL
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 {.*}, %rd[0-9]*, %rd[0-9]*, p, 1, 1, 0, 1;" %t/b1c/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-B1-N24
// RUN: grep -c "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32" %t/b1c/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-B1-SEND
// RUN: grep -c "red.global.add.v2.f32" %t/b1c/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-B1-RED
// RUN: grep -c "red.global.add.v4.f32" %t/b1c/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-B1-RED
// RUN: FileCheck %s --check-prefix=WGMMA-B1-PTX < %t/b1c/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptx
// RUN: FileCheck %s --check-prefix=WGMMA-B1-SMEM < %t/b1c/manifest.json
// RUN: FileCheck %s --check-prefix=WGMMA-B1C < %t/b1c/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptxas.txt
// RUN: smla-compile -o %t/h128c -quiet --cta-threads 512 --config d=512,dt=64,heads=128,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1
// RUN: grep -c "wgmma.mma_async" %t/h128c/smla_d512_dt64_h128_g1_b64_s4_base2_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-B1-ALL
// RUN: grep -c "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32" %t/h128c/smla_d512_dt64_h128_g1_b64_s4_base2_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-B1-SEND
// RUN: FileCheck %s --check-prefix=WGMMA-B1-PTX < %t/h128c/smla_d512_dt64_h128_g1_b64_s4_base2_bf16_bf16.ptx
// RUN: FileCheck %s --check-prefix=WGMMA-H128C < %t/h128c/smla_d512_dt64_h128_g1_b64_s4_base2_bf16_bf16.ptxas.txt
// RUN: FileCheck %s --check-prefix=CLUSTER-MANIFEST < %t/h128c/manifest.json
// RUN: not grep -c "ldmatrix\|mma.sync.aligned" %t/b1/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-NOSYNC
// RUN: FileCheck %s --check-prefix=WGMMA-B1 < %t/b1/smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16.ptxas.txt
// RUN: smla-compile -o %t/h32w -quiet --cta-threads 512 --config d=512,dt=64,heads=32,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,scatter=wgmma --config d=512,dt=64,heads=128,groups=1,block=64,lse=natural,positions=1,dq=bf16,dkv=bf16,scatter=wgmma
// RUN: grep -c "wgmma.mma_async" %t/h32w/smla_d512_dt64_h32_g1_b64_base2_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-ALL
// RUN: grep -c "wgmma.mma_async" %t/h32w/smla_d512_dt64_h128_g1_b64_s4_natural_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-ALL
// RUN: not grep -c "ldmatrix\|mma.sync.aligned" %t/h32w/smla_d512_dt64_h128_g1_b64_s4_natural_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-NOSYNC
// RUN: FileCheck %s --check-prefix=WGMMA-H32 < %t/h32w/smla_d512_dt64_h32_g1_b64_base2_bf16_bf16.ptxas.txt
// RUN: FileCheck %s --check-prefix=WGMMA-H128 < %t/h32w/smla_d512_dt64_h128_g1_b64_s4_natural_pos_bf16_bf16.ptxas.txt
// RUN: grep -c "wgmma.mma_async" %t/wg/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-ALL
// RUN: FileCheck %s --check-prefix=WGMMA-PTXAS < %t/wg/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptxas.txt
// RUN: not smla-compile -o %t/bad -quiet --config heads=16,scatter=tma 2>&1 | FileCheck %s --check-prefix=SCATTER
// RUN: smla-compile -o %t/fe -quiet --cta-threads 512 --config d=512,dt=64,heads=32,groups=1,block=64,tokens=2,lse=base2,positions=1,dq=bf16,dkv=bf16,scatter=wgmma,epilogue=fused
// RUN: FileCheck %s --check-prefix=WGMMA-PTXAS < %t/fe/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptxas.txt
// RUN: grep -c "wgmma.mma_async" %t/fe/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=WGMMA-ALL
// RUN: grep -c "ex2.approx" %t/fe/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=FUSED-EX2
// RUN: FileCheck %s --check-prefix=FUSED-MANIFEST < %t/fe/manifest.json
// RUN: smla-compile -o %t/fc -quiet --cta-threads 512 --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=1,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1,epilogue=fused,max_spill=48
// RUN: FileCheck %s --check-prefix=FUSED-B1C < %t/fc/smla_d512_dt64_h64_g1_b64_s2_base2_pos_bf16_bf16.ptxas.txt
// RUN: grep -c "ex2.approx" %t/fc/smla_d512_dt64_h64_g1_b64_s2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=FUSED-EX2
// RUN: grep -c "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32" %t/fc/smla_d512_dt64_h64_g1_b64_s2_base2_pos_bf16_bf16.ptx | FileCheck %s --check-prefix=FUSED-B1-SEND
// RUN: FileCheck %s --check-prefix=FUSED-B1-SMEM < %t/fc/manifest.json
// RUN: smla-compile -o %t/ov -quiet --cta-threads 512 --config d=512,dt=64,heads=32,groups=1,block=64,tokens=2,lse=base2,positions=1,dq=bf16,dkv=bf16,scatter=wgmma,epilogue=overlap
// RUN: FileCheck %s --check-prefix=WGMMA-PTXAS < %t/ov/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptxas.txt
// RUN: FileCheck %s --check-prefix=OVERLAP-PTX < %t/ov/smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16.ptx
// RUN: FileCheck %s --check-prefix=OVERLAP-MANIFEST < %t/ov/manifest.json
// RUN: not smla-compile -o %t/bad -quiet --cta-threads 512 --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1,epilogue=overlap 2>&1 | FileCheck %s --check-prefix=OVERLAP-SPILL
// RUN: smla-compile -o %t/ovc -quiet --cta-threads 512 --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1,epilogue=overlap,max_spill=32
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {.*}, %rd[0-9]*, %rd[0-9]*, p, 1, 1, 0, 1;" %t/ovc/smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16.ptx | FileCheck %s --check-prefix=OVERLAP-B1-N32
// RUN: FileCheck %s --check-prefix=OVERLAP-PTX < %t/ovc/smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16.ptx
// RUN: FileCheck %s --check-prefix=OVERLAP-B1-MANIFEST < %t/ovc/manifest.json
// RUN: not smla-compile -o %t/bad -quiet --config heads=32,scatter=wgmma,max_spill=600 2>&1 | FileCheck %s --check-prefix=OVERLAP-MAXSPILL
// RUN: smla-compile -o %t/ov2 -quiet --cta-threads 512 --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1,epilogue=overlap,overlap_chunks=2,max_spill=24
// RUN: FileCheck %s --check-prefix=OVERLAP2-PTXAS < %t/ov2/smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16.ptxas.txt
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {.*}, %rd[0-9]*, %rd[0-9]*, p, 1, 1, 0, 1;" %t/ov2/smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16.ptx | FileCheck %s --check-prefix=OVERLAP2-N32
// RUN: FileCheck %s --check-prefix=OVERLAP-PTX < %t/ov2/smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16.ptx
// RUN: FileCheck %s --check-prefix=OVERLAP2-MANIFEST < %t/ov2/manifest.json
// RUN: not smla-compile -o %t/bad -quiet --config heads=32,scatter=wgmma,epilogue=fused,overlap_chunks=2 2>&1 | FileCheck %s --check-prefix=OVERLAP2-NEEDS
// RUN: not smla-compile -o %t/bad -quiet --config heads=32,scatter=wgmma,epilogue=overlap,overlap_chunks=3 2>&1 | FileCheck %s --check-prefix=OVERLAP2-BAD
// RUN: not smla-compile -o %t/bad -quiet --config heads=16,epilogue=fused 2>&1 | FileCheck %s --check-prefix=FUSED-MMA
// RUN: not smla-compile -o %t/bad -quiet --config heads=32,scatter=wgmma,epilogue=registers 2>&1 | FileCheck %s --check-prefix=FUSED-VALUE
// RUN: not smla-compile -o %t/bad -quiet --config d=512,dt=64,heads=32,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,scatter=wgmma,epilogue=fused 2>&1 | FileCheck %s --check-prefix=FUSED-NONE
// RUN: not smla-compile -o %t/bad -quiet --config heads=64,cluster=1 2>&1 | FileCheck %s --check-prefix=CLUSTER
// RUN: not smla-compile -o %t/bad -quiet --config heads=64,scatter=wgmma,cluster=maybe 2>&1 | FileCheck %s --check-prefix=CLUSTER-VALUE
// RUN: not smla-compile -o %t/bad -quiet --cta-threads 512 --config d=512,dt=64,heads=32,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1 2>&1 | FileCheck %s --check-prefix=CLUSTER-SPLIT
// RUN: smla-compile -o %t/s -quiet -mma=false --config d=512,dt=64,heads=16,groups=1,block=64,lse=base2,positions=1,dq=bf16,dkv=bf16
// RUN: FileCheck %s --check-prefix=SCALAR < %t/s/smla_d512_dt64_h16_g1_b64_base2_pos_bf16_bf16.ptx

// The GLM-5.2 per-rank kernel assembles for sm_90a without spills.
// USAGE-DAG: _bwd: {{[0-9]+}} registers, 0 bytes spill stores, 0 bytes spill loads
// USAGE-DAG: _dkv_zero: {{[0-9]+}} registers, 0 bytes spill stores, 0 bytes spill loads
// USAGE-DAG: _dkv_cast: {{[0-9]+}} registers, 0 bytes spill stores, 0 bytes spill loads

// PTX-DAG: .version 8.1
// PTX-DAG: .target sm_90a
// PTX-DAG: .extern .shared .align 1024 .b8 smla_smem[];
// PTX-DAG: cp.async.cg.shared.global [%rd{{[0-9]+}}], [%rd{{[0-9]+}}], 16, %r{{[0-9]+}};
// PTX-DAG: @%p{{[0-9]+}} red.global.add.v4.f32
// PTX-DAG: ex2.approx
// Both block products on tensor cores: S = Q.K^T, dP = dO.V^T and dQ += dS.K.
// PTX-DAG: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX-DAG: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// At H = 16 q and do are staged in shared memory: the scores/dP A
// fragments come from ldmatrix.x4, and so do the key fragments (block 64
// at 256 threads: 4 items of (m tile, 16 keys) for 8 warps, one
// ldmatrix.x4 for 16 keys; no .x2 anywhere, the RUN line after the PTX
// checks); the dKV B fragments are
// split into even/odd columns by prmt.
// PTX-DAG: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX-DAG: prmt.b32 {{.*}}, 0x5410U;
// PTX-DAG: prmt.b32 {{.*}}, 0x7632U;
// sm_scale is the bwd kernel's last parameter (f32).
// PTX-DAG: .param .u32 smla_d512_dt64_h16_g1_b64_base2_pos_bf16_bf16_bwd_param_13,
// PTX-DAG: .param .f32 smla_d512_dt64_h16_g1_b64_base2_pos_bf16_bf16_bwd_param_14

// H = 16 (block 64), 32 and 64 (block 32; 64 as two CTAs of 32 heads) at
// 256 threads: no spills, with tensor cores.
// SPILLS: Function properties for smla_d512_dt64_h16_g1_b64_natural_bf16_bf16_bwd
// SPILLS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// SPILLS: Function properties for smla_d512_dt64_h32_g1_b32_base2_pos_bf16_bf16_bwd
// SPILLS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// SPILLS: Function properties for smla_d512_dt64_h64_g1_b32_s2_base2_pos_bf16_bf16_bwd
// SPILLS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// MMA-COUNT-3: .entry {{.*}}_bwd(
// MMA: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32

// The CUDA-core fallback (-mma=false) has no tensor-core instruction.
// SCALAR-NOT: mma.sync
// SCALAR: fma.rn.f32
// SCALAR-NOT: mma.sync

// MANIFEST-NOT: "sm_scale": {{[0-9]}}
// MANIFEST: "format": "smla-manifest"
// MANIFEST: "kind": "bwd"
// MANIFEST: "dynamic_smem": 119424
// MANIFEST: "name": "sm_scale",
// MANIFEST-NEXT: "type": "f32"

// The token-pair kernel with scatter=wgmma: the block products as one
// chain of 32 m64n64k16 wgmma over [q; do] and 4 m64n32k16 for the rope
// tail (both operands by descriptor: the keys swizzled), then six chains
// of four m64n48k16 for the dKV scatter (smla-defer-scatter: three chunks
// in the block loop, three after it), the reductions as red.v4 after
// shfl.xor exchanges, and dQ^T (dq_packed) as 2 x 4 m64n32k16 and 4
// m64n8k16 with both operands read MN-major (flags 1, 1). No mma.sync and
// no ldmatrix are left; ptxas neither spills nor serialises the wgmma
// (C7520).
// WGMMA-N64: {{^}}32{{$}}
// WGMMA-N32: {{^}}4{{$}}
// WGMMA-DQ32: {{^}}8{{$}}
// WGMMA-DQ8: {{^}}4{{$}}
// WGMMA-NOSYNC: {{^}}0{{$}}
// WGMMA-N48: {{^}}24{{$}}
// WGMMA-ALL: {{^}}72{{$}}
// B1's 32-head CTAs with scatter=wgmma (the library's H=64 kernels): the
// same 72 wgmma and no mma.sync, though smla-compile prefetches keys by
// default (the pipeline leaves smla-prefetch-keys out for scatter=wgmma:
// dq_packed reads the key tile until the end of each block).
// With cluster=1 the token's two head blocks run as a
// cluster of two that split the dKV columns (smla-defer-scatter's column
// halves): each of the six chunks (three in the loop, three after it) is
// 8 m64n24k16 (own and partner rows, B read MN-major) instead of 4
// m64n48k16, so 96 wgmma in all; per chunk one red.v4 and one red.v2 per
// slot (half the bytes of the 48-column form); pack_dkv sends its 4
// packed pairs per thread to the partner with st.async, chunk 0 waits on
// the mbarrier (in the loop and after it), and the partner's rows for the
// column half add a 36 KB tile (227328 bytes in all). H = 128's four
// head blocks run as two such clusters (hb, hb ^ 1): the same kernel
// body, grid y 4.
// WGMMA-B1-ALL: {{^}}96{{$}}
// WGMMA-B1-N24: {{^}}48{{$}}
// WGMMA-B1-SEND: {{^}}4{{$}}
// WGMMA-B1-RED: {{^}}12{{$}}
// WGMMA-B1-PTX: .reqnctapercluster 1, 2, 1
// WGMMA-B1-PTX: fence.mbarrier_init.release.cluster;
// WGMMA-B1-PTX: barrier.cluster.wait.acquire.aligned;
// WGMMA-B1-PTX: mbarrier.try_wait.parity.shared::cta.b64
// WGMMA-B1-PTX: mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r{{[0-9]+}}], 8192;
// WGMMA-B1-PTX: mbarrier.try_wait.parity.shared::cta.b64
// WGMMA-B1-SMEM: "dynamic_smem": 227328
// WGMMA-H128C-NOT: C7520
// WGMMA-H128C: Function properties for smla_d512_dt64_h128_g1_b64_s4_base2_bf16_bf16_bwd
// WGMMA-H128C-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// WGMMA-B1C-NOT: C7520
// WGMMA-B1C: Function properties for smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16_bwd
// WGMMA-B1C-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// WGMMA-B1-NOT: C7520
// WGMMA-B1: Function properties for smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16_bwd
// WGMMA-B1-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// The library's H=32 and H=128 kernels (one and four 32-head CTAs per
// token) are the same CTA.
// WGMMA-H32-NOT: C7520
// WGMMA-H32: Function properties for smla_d512_dt64_h32_g1_b64_base2_bf16_bf16_bwd
// WGMMA-H32-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// WGMMA-H128-NOT: C7520
// WGMMA-H128: Function properties for smla_d512_dt64_h128_g1_b64_s4_natural_pos_bf16_bf16_bwd
// WGMMA-H128-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// WGMMA-PTXAS-NOT: C7520
// WGMMA-PTXAS: Function properties for smla_d512_dt64_h32_g1_b64_t2_base2_pos_bf16_bf16_bwd
// WGMMA-PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// SCATTER: bad value 'tma' for configuration key 'scatter'
// The manifest records the cluster form (runtime/MANIFEST.md); an
// unclustered kernel leaves the key out (H64-SMEM).
// CLUSTER-MANIFEST: "cluster": true
// epilogue=fused (the token-pair kernel of GLM-5.2's shape): the same
// wgmma, no spill, the 16 exp2 of the products' warpgroup the kernel's
// only ones (the CTA-wide softmax emits 4 a thread).
// FUSED-EX2: 16
// FUSED-MANIFEST: "epilogue": "fused"
// FUSED-MMA: epilogue = fused needs scatter = wgmma
// epilogue=overlap: the last dKV chunk in warpgroups 1-3 alongside the
// fused run, ordered by named barrier 1 (one arrive in the chunk, one
// sync in warpgroup 0), the token-pair kernel still without spill. B1's
// cluster kernel spills that way (32 bytes with delta on every warp):
// refused unless the configuration accepts it with max_spill, which the
// manifest records. Its chunk runs as 8
// m64n32k16 (own and partner rows, two products, two k steps) per
// warpgroup instead of m64n24k16.
// OVERLAP-PTX: bar.arrive 1, 512;
// OVERLAP-PTX: bar.sync 1, 512;
// OVERLAP-PTX-NOT: bar.arrive
// OVERLAP-MANIFEST: "epilogue": "overlap"
// OVERLAP-SPILL: kernel smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16_bwd spills registers ({{[0-9]+}} bytes stored, {{[0-9]+}} loaded, max_spill=0;
// OVERLAP-B1-N32: {{^}}8{{$}}
// OVERLAP-B1-MANIFEST: "max_spill": 32
// OVERLAP-MAXSPILL: bad value '600' for configuration key 'max_spill'
// overlap_chunks=2: chunks 1 and 2 both in warpgroups 1-3 alongside the
// run (16 m64n32k16 of the chunks, one arrive, after the last); the
// manifest records it. B1's cluster kernel (the library's configuration)
// spills 24 bytes with delta on every warp: four thread-layout values
// stored before the step loop and reloaded in the CTA's tail after it
// (cuobjdump; docs/wgmma-kernels.md), accepted by max_spill=24.
// OVERLAP2-PTXAS: Function properties for smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16_bwd
// OVERLAP2-PTXAS-NEXT: {{[0-9]+}} bytes stack frame, {{(8|16|24) bytes spill stores}}
// OVERLAP2-N32: {{^}}16{{$}}
// OVERLAP2-MANIFEST: "epilogue": "overlap"
// OVERLAP2-MANIFEST: "overlap_chunks": 2
// OVERLAP2-NEEDS: overlap_chunks needs epilogue=overlap
// OVERLAP2-BAD: bad value '3' for configuration key 'overlap_chunks'
// B1's cluster kernel for a base-2 lse, fused without the overlap
// (epilogue=fused): the same 16 exp2, the 16
// bf16 pairs of dS^T and P^T sent to the partner straight from the
// registers (one st.async each), and without the f32 S and dP tiles
// 17,408 bytes less shared memory than the CTA-wide kernel's 227,328
// (WGMMA-B1-SMEM). With delta on every warp ptxas spills 40 bytes at the
// 128-register cap of 512 threads here (44 with the non-finite row guard
// after the step loop), so it compiles only with max_spill; the library's
// overlap kernels spill less (OVERLAP2-PTXAS).
// FUSED-B1C-NOT: C7520
// FUSED-B1C: Function properties for smla_d512_dt64_h64_g1_b64_s2_base2_pos_bf16_bf16_bwd
// FUSED-B1C-NEXT: {{[0-9]+}} bytes stack frame, {{[0-9]+}} bytes spill stores
// FUSED-B1-SEND: {{^}}16{{$}}
// FUSED-B1-SMEM: "dynamic_smem": 209920
// FUSED-VALUE: bad value 'registers' for configuration key 'epilogue'
// At 256 threads (the default --cta-threads) no wgmma products, so
// nothing to fuse: refused, not recorded in the manifest as fused.
// FUSED-NONE: epilogue=fused fuses nothing here: it needs the wgmma block products of a 32-row CTA at block 64 on 512 threads
// CLUSTER-MANIFEST: "head_blocks": 4
// CLUSTER: cluster = 1 needs scatter = wgmma and tokens = 1
// CLUSTER-VALUE: bad value 'maybe' for configuration key 'cluster'
// CLUSTER-SPLIT: cluster=1 builds no cluster here: it needs the wgmma form (32-head CTAs) with an even number of head blocks per group

// BAD: smla-compile: error: --config 'heads=3,groups=2': heads (3) must be a positive multiple of groups (2)

// SPLIT: smla-compile: error: --config 'heads=16,head_blocks=3': head_blocks (3) must divide the heads per group (16)

// H = 128 at block 64 is split by itself into eight head blocks of 16 (one
// CTA each): 64 or 32 heads per CTA cannot stage both their q and do rows
// at block 64 (at 256 threads a CTA of 32 heads would need 9 column pairs
// per warp to keep its dQ accumulator in registers, more than the 8 the
// register form takes, so the accumulator's 74752 bytes stay in shared
// memory). The grid's second extent counts the blocks; the tiles, with q
// and do staged, are those of H = 16 (the same 119424 bytes, its
// accumulator in registers).
// H128: "head_blocks": 8
// H128-NEXT: "heads": 128
// At H = 16, 256 threads and two CTAs per SM the dQ accumulator goes to
// registers only while its column pairs fit the 128 registers with the
// rest of the kernel (5 pairs per warp at D = 512): at D = 960 (8 pairs)
// it keeps the shared form and compiles without a spill (smla-compile
// refuses spills; a stack frame would mean a demoted private array).
// D960: Function properties for smla_d960_dt64_h16_g1_b32_base2_pos_bf16_bf16_bwd
// D960-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// The library's B1 kernel (H = 64 as two CTAs of 32 heads, block 64, 512
// threads): its scores/dP items are (m tile, 16 keys), so every key
// fragment comes from ldmatrix.x4 (no .x2 anywhere), and the kernel fits
// one CTA of 512 threads per SM without spilling, its dQ accumulator in
// registers (5 column pairs per warp, 40 registers). Without the
// accumulator's 74752 bytes the CTA stages both q and do at block 64
// (163968 bytes).
// H64-NOT: ldmatrix.sync.aligned.m8n8.x2
// H64: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// H64-NOT: ldmatrix.sync.aligned.m8n8.x2
// H64-PTXAS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// H64-PTXAS-NEXT: Used {{[0-9]|[1-9][0-9]|1[01][0-9]|12[0-8]}} registers
// H64-SMEM-NOT: "cluster"
// H64-SMEM: "head_blocks": 2
// H64-SMEM: "dynamic_smem": 163968
// H128: "entry": "smla_d512_dt64_h128_g1_b64_s8_base2_pos_bf16_bf16_bwd"
// H128-NEXT: "kind": "bwd"
// H128: "dynamic_smem": 119424
// H128-NEXT: "grid": [
// H128-NEXT: "T",
// H128-NEXT: 8,
// H128-NEXT: 1
// H128-PTXAS: Function properties for smla_d512_dt64_h128_g1_b64_s8_base2_pos_bf16_bf16_bwd

// Without head_blocks, smla-compile keeps the fewest head blocks (of 16 to
// 64 heads) whose CTA stages both q and do: H = 64 at block 64 stages both
// only with 16 heads per CTA (4 blocks, 119424 bytes). A group of 17 heads
// (prime) has one candidate, itself. An explicit head_blocks is kept.
// AUTO: "head_blocks": 4,
// AUTO-NEXT: "heads": 64
// AUTO: "entry": "smla_d512_dt64_h64_g1_b64_s4_base2_bf16_bf16_bwd"
// AUTO: "dynamic_smem": 119424
// AUTO: "head_blocks": 1,
// AUTO-NEXT: "heads": 34
// AUTO: "entry": "smla_d64_dt32_h34_g2_b16_base2_bf16_bf16_bwd"
// AUTO: "head_blocks": 4,
// AUTO-NEXT: "heads": 64
// AUTO: "entry": "smla_d64_dt32_h64_g1_b16_s4_base2_bf16_bf16_bwd"
// H128-PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// --ctas-per-sm bounds the staging of q and do rows: H = 16, block 32 has
// 80000 B of tiles (P and dS over the scores and dP tiles), 42624 B
// without the dQ accumulator's 37376 B, which smla-gpu-map plans in
// registers where 256 threads at one or two CTAs per SM leave 255 or 128
// registers per thread; staged q adds 18688 B and do 16640 B. One CTA
// per SM (226304 B) or two (115712 B each) stage both (77952 B), three
// (76800 B each; 85 registers per thread, so the accumulator stays in
// shared memory) neither.
// C1: "dynamic_smem": 77952
// C2: "dynamic_smem": 77952
// C3: "dynamic_smem": 80000

// At 256 threads ptxas keeps the kernel small enough for 2 CTAs per SM by
// itself (no directive, above). At 512 threads (config keys threads and
// ctas_per_sm) it would take 81 registers: smla-compile assembles again
// with .minnctapersm 2, which caps them at 64.
// C2R: .entry smla_d512_dt64_h16_g1_b32_base2_pos_bf16_bf16_bwd(
// C2R: .maxntid 512, 1, 1
// C2R-NEXT: .minnctapersm 2
// C2R-REGS: Function properties for smla_d512_dt64_h16_g1_b32_base2_pos_bf16_bf16_bwd
// C2R-REGS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// C2R-REGS-NEXT: Used {{[1-5]?[0-9]|6[0-4]}} registers
// RESIDENT: smla-compile: error: --config 'heads=16,threads=1024,ctas_per_sm=3': 3 CTAs of 1024 threads cannot be resident on one SM (2048 threads)
// THREADS: smla-compile: error: --config 'heads=16,threads=100': bad value '100' for configuration key 'threads'
// C0: smla-compile: error: --ctas-per-sm 0: must be in [1, 32]

// SCALE: smla-compile: error: --config 'sm_scale=0.1': sm_scale is not a compile-time setting: the bwd kernel takes it as its f32 'sm_scale' parameter

// A candidate split that fails is named, with its first diagnostic (64
// heads in one CTA at block 64 do not fit); the next candidate is used.
// NOTE: note: --config 'd=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0': head_blocks=1 skipped: {{.*}}needs 261376 bytes of shared memory
// NOTE-NOT: head_blocks=2 skipped
// NOTE: wrote {{.*}}smla_d512_dt64_h64_g1_b64_s4_base2_bf16_bf16.cubin
