// REQUIRES: ptxas
// RUN: rm -rf %t
// RUN: smla-compile -o %t -quiet --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,schedule=warp_specialized,max_spill=288
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: FileCheck %s --check-prefix=PTXAS < %t/smla_d512_dt64_h64_g1_b64_base2_bf16_bf16.ptxas.txt
// RUN: grep -o "setmaxnreg[.a-z]*.u32[[:space:]]*[0-9]*" %t/smla_d512_dt64_h64_g1_b64_base2_bf16_bf16.ptx | FileCheck %s --check-prefix=REGS
// RUN: grep -c "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" %t/smla_d512_dt64_h64_g1_b64_base2_bf16_bf16.ptx | FileCheck %s --check-prefix=DQ256
// RUN: grep -c "red.global.add.L2::cache_hint.v4.f32" %t/smla_d512_dt64_h64_g1_b64_base2_bf16_bf16.ptx | FileCheck %s --check-prefix=RED
// RUN: not smla-compile -o %t/spill -quiet --config d=512,dt=64,heads=64,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,schedule=warp_specialized 2>&1 | FileCheck %s --check-prefix=SPILL
// RUN: not smla-compile -o %t/h16 -quiet --config d=512,dt=64,heads=16,groups=1,block=64,lse=base2,positions=0,dq=bf16,dkv=bf16,schedule=warp_specialized 2>&1 | FileCheck %s --check-prefix=H16

// The B1 kernel on the warp-specialized schedule (docs/schedule.md),
// assembled by ptxas for sm_90a: one CTA per (token, 64 heads) of 384
// threads and one 64-head block, its shared memory in one dynamic
// allocation.
// MANIFEST: "schedule": "warp_specialized"
// MANIFEST: "entry": "smla_d512_dt64_h64_g1_b64_base2_bf16_bf16_bwd"
// MANIFEST: "block": [
// MANIFEST-NEXT: 384,
// MANIFEST: "dynamic_smem": 230272,
// MANIFEST-NEXT: "grid": [
// MANIFEST-NEXT: "T",
// MANIFEST-NEXT: 1,

// ptxas allocates for the even split (65536 / 384 -> 168 per thread);
// setmaxnreg moves 144 from the producer (24) to the consumers (240) and
// each role gives back or takes what it moved before the code after the
// roles (the non-finite row count).
// PTXAS: Used 168 registers, used 2 barriers
// REGS-DAG: setmaxnreg.dec.sync.aligned.u32 24
// REGS-DAG: setmaxnreg.inc.sync.aligned.u32 240
// REGS-DAG: setmaxnreg.inc.sync.aligned.u32 168
// REGS-DAG: setmaxnreg.dec.sync.aligned.u32 168

// The softmax role's dQ[:, 0:256] is one m64n256 accumulator: four k16
// steps per block of 64 keys.
// DQ256: 4

// dKV: 9 chunks of 64 columns (576 / 64), each 8 red.v4 per thread.
// RED: 72

// The consumers spill a few loop bounds at 240 registers (P^T and dS^T go
// to shared memory by stmatrix, whose addresses no longer spill); without
// max_spill the kernel is refused.
// SPILL: spills registers (12 bytes stored, 68 loaded, max_spill=0

// The schedule's tiles are 64 heads: a 16-head configuration is refused
// with the reason, before any pass runs.
// H16: schedule = warp_specialized needs block = 64, 64 heads per CTA (heads / groups a multiple of 64)
