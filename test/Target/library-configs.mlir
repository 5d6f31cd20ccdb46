// REQUIRES: ptxas
// The library's configurations for the head counts and output types users
// run beyond GLM-5.2's H=16 (kernels/CMakeLists.txt): H=8 per token and on
// token pairs (16-row CTAs, as H=16's), and fp32 dq at H=8 and at H=32 on
// the wgmma kernel, each without a spill; every kernel records its compiler's
// commit and the configuration it was built from (provenance).
// RUN: rm -rf %t
// RUN: smla-compile -o %t -quiet --cta-threads 512 --config d=512,dt=64,heads=8,groups=1,block=32,lse=base2,positions=1,dq=bf16,dkv=bf16,threads=256,ctas_per_sm=2 --config d=512,dt=64,heads=16,groups=1,block=32,tokens=2,lse=natural,positions=0,dq=bf16,dkv=bf16,threads=256,ctas_per_sm=2 --config d=512,dt=64,heads=8,groups=1,block=32,lse=natural,positions=1,dq=f32,dkv=f32,threads=256,ctas_per_sm=2 --config d=512,dt=64,heads=32,groups=1,block=64,lse=base2,positions=0,dq=f32,dkv=f32,scatter=wgmma,epilogue=overlap
// RUN: cat %t/*.ptxas.txt | FileCheck %s --check-prefix=SPILLS
// RUN: not grep -E "[1-9][0-9]* bytes spill" %t/*.ptxas.txt
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: smla-compile --version | FileCheck %s --check-prefix=VERSION

// SPILLS-DAG: Function properties for smla_d512_dt64_h8_g1_b32_base2_pos_bf16_bf16_bwd
// SPILLS-DAG: Function properties for smla_d512_dt64_h16_g1_b32_t2_natural_bf16_bf16_bwd
// SPILLS-DAG: Function properties for smla_d512_dt64_h8_g1_b32_natural_pos_f32_f32_bwd
// SPILLS-DAG: Function properties for smla_d512_dt64_h32_g1_b64_base2_f32_f32_bwd

// MANIFEST: "compiler": {
// MANIFEST-DAG: "commit":
// MANIFEST-DAG: "name": "smla-compile"
// MANIFEST: "kernels": [
// MANIFEST: "compiler": "smla-compile {{.+}}"
// MANIFEST: "dq_type": "bf16"
// MANIFEST: "heads": 8
// MANIFEST: "spec": "d=512,dt=64,heads=8,groups=1,block=32,lse=base2,positions=1,dq=bf16,dkv=bf16,threads=256,ctas_per_sm=2"
// MANIFEST: "tokens": 2
// MANIFEST: "dq_type": "f32"
// MANIFEST: "spec": "d=512,dt=64,heads=32,groups=1,block=64,lse=base2,positions=0,dq=f32,dkv=f32,scatter=wgmma,epilogue=overlap,threads=512,ctas_per_sm=1"

// VERSION: smla-compile {{[0-9a-f]+|unknown}}
