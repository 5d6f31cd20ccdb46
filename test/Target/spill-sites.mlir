// REQUIRES: ptxas, cuobjdump
// RUN: rm -rf %t
// RUN: smla-compile -o %t -quiet --cta-threads 512 --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1,epilogue=overlap,overlap_chunks=2,max_spill=24 --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=1,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1,epilogue=overlap,overlap_chunks=2,max_spill=24
// RUN: %spill_sites --function _bwd %t/smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16.cubin %t/smla_d512_dt64_h64_g1_b64_s2_base2_pos_bf16_bf16.cubin | FileCheck %s
// RUN: smla-compile -o %t/fused -quiet --cta-threads 512 --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=1,dq=bf16,dkv=bf16,scatter=wgmma,cluster=1,epilogue=fused,max_spill=48
// RUN: not %spill_sites --function _bwd %t/fused/smla_d512_dt64_h64_g1_b64_s2_base2_pos_bf16_bf16.cubin | FileCheck %s --check-prefix=FUSED

// The library's base-2 cluster kernels (B1's, as kernels/CMakeLists.txt
// configures them) spill a few bytes with delta on every warp, which their
// max_spill=24 accepts because every spill instruction lies outside the
// step loop: stored before it, reloaded in the CTA's tail
// (docs/wgmma-kernels.md, "The prologue's delta").
// CHECK: smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16_bwd: {{[0-9]+}} spill instructions, 0 in the step loop
// CHECK: smla_d512_dt64_h64_g1_b64_s2_base2_pos_bf16_bf16_bwd: {{[0-9]+}} spill instructions, 0 in the step loop

// The check can fail: the fused form without the overlap (not in the
// library) spills at its step loop's head, and spill_sites.py says so
// and exits 1.
// FUSED: smla_d512_dt64_h64_g1_b64_s2_base2_pos_bf16_bf16_bwd: {{[0-9]+}} spill instructions, {{[1-9][0-9]*}} in the step loop
