// REQUIRES: ptxas
// RUN: rm -rf %t
// RUN: smla-compile -o %t --config d=512,dt=64,heads=16,groups=1,block=64,lse=base2,positions=1,dq=bf16,dkv=bf16 | FileCheck %s --check-prefix=USAGE
// RUN: FileCheck %s --check-prefix=PTX < %t/smla_d512_dt64_h16_g1_b64_base2_pos_bf16_bf16.ptx
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json
// RUN: not smla-compile -o %t --config heads=3,groups=2 2>&1 | FileCheck %s --check-prefix=BAD

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

// MANIFEST: "format": "smla-manifest"
// MANIFEST: "kind": "bwd"
// MANIFEST: "dynamic_smem": 127104

// BAD: smla-compile: error: --config 'heads=3,groups=2': heads (3) must be a positive multiple of groups (2)
