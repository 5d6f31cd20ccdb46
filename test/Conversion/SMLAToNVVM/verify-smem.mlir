// RUN: smla-opt --split-input-file --pass-pipeline='builtin.module(gpu.module(smla-verify-smem))' --verify-diagnostics %s

// Two tiles live in the same loop may not share bytes: the original NaN bug
// (a Q tile overwritten by a dKV staging tile).
module attributes {gpu.container_module} {
  gpu.module @k {
    memref.global "public" @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
    gpu.func @reused(%n: index) kernel attributes {smla.dynamic_smem = 4096 : i64} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2048 = arith.constant 2048 : index
      %f = arith.constant 1.0 : f32
      %g = memref.get_global @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
      %raw = memref.reinterpret_cast %g to offset: [0], sizes: [4096], strides: [1] : memref<0xi8, #gpu.address_space<workgroup>> to memref<4096xi8, #gpu.address_space<workgroup>>
      // expected-note @below {{the other live slice}}
      %q = memref.view %raw[%c0][] : memref<4096xi8, #gpu.address_space<workgroup>> to memref<16x64xf32, #gpu.address_space<workgroup>>
      // expected-error @below {{shares shared-memory bytes [0, 2048) with a slice that is live at the same time}}
      %s = memref.view %raw[%c0][] : memref<4096xi8, #gpu.address_space<workgroup>> to memref<8x64xf32, #gpu.address_space<workgroup>>
      scf.for %i = %c0 to %n step %c1 {
        memref.store %f, %s[%c0, %c0] : memref<8x64xf32, #gpu.address_space<workgroup>>
        %v = memref.load %q[%c0, %c0] : memref<16x64xf32, #gpu.address_space<workgroup>>
      }
      gpu.return
    }
  }
}

// -----

// Disjoint live ranges may share bytes; disjoint bytes may share a range.
module attributes {gpu.container_module} {
  gpu.module @k {
    memref.global "public" @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
    gpu.func @fine(%n: index) kernel attributes {smla.dynamic_smem = 8192 : i64} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4096 = arith.constant 4096 : index
      %f = arith.constant 1.0 : f32
      %g = memref.get_global @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
      %raw = memref.reinterpret_cast %g to offset: [0], sizes: [8192], strides: [1] : memref<0xi8, #gpu.address_space<workgroup>> to memref<8192xi8, #gpu.address_space<workgroup>>
      %a = memref.view %raw[%c0][] : memref<8192xi8, #gpu.address_space<workgroup>> to memref<16x64xf32, #gpu.address_space<workgroup>>
      %b = memref.view %raw[%c4096][] : memref<8192xi8, #gpu.address_space<workgroup>> to memref<16x64xf32, #gpu.address_space<workgroup>>
      scf.for %i = %c0 to %n step %c1 {
        memref.store %f, %a[%c0, %c0] : memref<16x64xf32, #gpu.address_space<workgroup>>
        memref.store %f, %b[%c0, %c0] : memref<16x64xf32, #gpu.address_space<workgroup>>
      }
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @k {
    memref.global "public" @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
    gpu.func @past_end() kernel attributes {smla.dynamic_smem = 1024 : i64} {
      %c512 = arith.constant 512 : index
      %g = memref.get_global @smla_smem : memref<0xi8, #gpu.address_space<workgroup>>
      %raw = memref.reinterpret_cast %g to offset: [0], sizes: [4096], strides: [1] : memref<0xi8, #gpu.address_space<workgroup>> to memref<4096xi8, #gpu.address_space<workgroup>>
      // expected-error @below {{is a shared-memory slice [512, 4608) past the kernel's smla.dynamic_smem of 1024 bytes}}
      %a = memref.view %raw[%c512][] : memref<4096xi8, #gpu.address_space<workgroup>> to memref<16x64xf32, #gpu.address_space<workgroup>>
      gpu.return
    }
  }
}
