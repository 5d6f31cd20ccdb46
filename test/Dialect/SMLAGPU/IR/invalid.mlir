// RUN: smla-opt %s -split-input-file -verify-diagnostics
// The smla_gpu verifiers, one error each.

gpu.module @m {
  gpu.func @regs() kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    // expected-error @+1 {{asks for 66560 registers, more than the 64512 the CTA starts with (168 per thread at 384 threads)}}
    smla_gpu.warp_specialize roles ["a", "b", "c"] registers [40, 240, 240] {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @threads() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    // expected-error @+1 {{has 3 roles, so the kernel must have 384 threads, got 256}}
    smla_gpu.warp_specialize roles ["a", "b", "c"] registers [40, 232, 232] {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @odd_registers() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
    // expected-error @+1 {{expects register counts that setmaxnreg takes (multiples of 8 in [24, 256]), got 20}}
    smla_gpu.warp_specialize roles ["a", "b"] registers [20, 232] {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

func.func @thread_outside() {
  // expected-error @+1 {{must be inside a smla_gpu.warp_specialize role}}
  %t = smla_gpu.thread_in_warpgroup : index
  return
}

// -----

func.func @tile_in_global(%a: memref<64x64xbf16>, %b: memref<64x64xbf16, #gpu.address_space<workgroup>>) {
  // expected-error @+1 {{expects A in workgroup (shared) memory}}
  %s = smla_gpu.wgmma a_tile(%a : memref<64x64xbf16>) b_tile(%b : memref<64x64xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 64 : i64, a_major = "k", b_major = "k", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 0 : i64} -> vector<32xf32>
  return
}

// -----

func.func @out_of_tile(%a: memref<64x64xbf16, #gpu.address_space<workgroup>>) {
  // expected-error @+1 {{reads B out of its tile or at an offset the 128-byte swizzle does not allow (rows 0 + 64, columns 16 + 64}}
  %s = smla_gpu.wgmma a_tile(%a : memref<64x64xbf16, #gpu.address_space<workgroup>>) b_tile(%a : memref<64x64xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 64 : i64, a_major = "k", b_major = "k", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 16 : i64} -> vector<32xf32>
  return
}

// -----

func.func @mn_major_offset(%a: memref<64x128xbf16, #gpu.address_space<workgroup>>) {
  // expected-error @+1 {{reads B out of its tile or at an offset the 128-byte swizzle does not allow (rows 0 + 64, columns 32 + 64}}
  %s = smla_gpu.wgmma a_tile(%a : memref<64x128xbf16, #gpu.address_space<workgroup>>) b_tile(%a : memref<64x128xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 64 : i64, a_major = "k", b_major = "mn", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 32 : i64} -> vector<32xf32>
  return
}

// -----

func.func @both_a(%a: memref<64x64xbf16, #gpu.address_space<workgroup>>, %r: vector<16xi32>) {
  // expected-error @+1 {{expects A as exactly one of a tile or registers}}
  %s = smla_gpu.wgmma a_tile(%a : memref<64x64xbf16, #gpu.address_space<workgroup>>) a_regs(%r : vector<16xi32>) b_tile(%a : memref<64x64xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 64 : i64, a_major = "k", b_major = "k", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 0 : i64} -> vector<32xf32>
  return
}

// -----

func.func @short_regs(%a: memref<64x64xbf16, #gpu.address_space<workgroup>>, %r: vector<8xi32>) {
  // expected-error @+1 {{expects 16 A registers for a k extent of 64}}
  %s = smla_gpu.wgmma a_regs(%r : vector<8xi32>) b_tile(%a : memref<64x64xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 64 : i64, a_major = "k", b_major = "mn", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 0 : i64} -> vector<32xf32>
  return
}

// -----

func.func @wide_fragment(%v: memref<64xf32>) {
  // expected-error @+1 {{expects 32 elements per thread for 64 columns, got 'vector<16xf32>'}}
  %r = smla_gpu.fragment_rows %v {n = 64 : i64} : memref<64xf32> -> vector<16xf32>
  return
}

// -----

func.func @reduce_past_width(%a: vector<32xf32>, %s: vector<32xi32>, %dkv: memref<?x1x576xf32>, %g: index) {
  // expected-error @+1 {{reduces columns 544 + 64 outside dkv's 576}}
  smla_gpu.reduce_dkv %a slots(%s : vector<32xi32>) into %dkv[%g] {col = 544 : i64} : vector<32xf32>, memref<?x1x576xf32>
  return
}

// -----

func.func @pipeline_words(%b: memref<4xi64, #gpu.address_space<workgroup>>) {
  // expected-error @+1 {{expects 2 i64 mbarrier words in workgroup memory}}
  %p = smla_gpu.pipeline_create %b : memref<4xi64, #gpu.address_space<workgroup>> -> !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
  return
}

// -----

gpu.module @m {
  gpu.func @rows_short(%v: memref<32xf32>) kernel {
    // expected-error @+1 {{expects at least 64 values (one per row)}}
    %r = smla_gpu.fragment_rows %v {n = 64 : i64} : memref<32xf32> -> vector<32xf32>
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @columns_short(%v: memref<32xi32>) kernel {
    // expected-error @+1 {{expects at least 64 values (one per column)}}
    %c = smla_gpu.fragment_columns %v {n = 64 : i64} : memref<32xi32> -> vector<32xi32>
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @rows_type(%v: memref<64xi32>) kernel {
    // expected-error @+1 {{expects the values' element type}}
    %r = smla_gpu.fragment_rows %v {n = 64 : i64} : memref<64xi32> -> vector<32xf32>
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @pipeline_in_role() kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    %bars = memref.alloca() : memref<2xi64, #gpu.address_space<workgroup>>
    smla_gpu.warp_specialize roles ["a", "b", "c"] registers [24, 240, 240] {
      // expected-error @+1 {{must run on every thread, before the roles}}
      %p = smla_gpu.pipeline_create %bars : memref<2xi64, #gpu.address_space<workgroup>> -> !smla_gpu.pipeline<stages = 1, producers = 128, consumers = 256>
    }, {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @slots_unmasked(%idx: vector<64xi32>) kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    %slots = memref.alloca() : memref<64xi32, #gpu.address_space<workgroup>>
    smla_gpu.warp_specialize roles ["a", "b", "c"] registers [24, 240, 240] {
      // expected-error @+1 {{expects at least one mask: a slot is an index only where its masks hold}}
      "smla_gpu.write_slots"(%idx, %slots) : (vector<64xi32>, memref<64xi32, #gpu.address_space<workgroup>>) -> ()
    }, {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @slots_per_element(%p: vector<32xf32>, %s: vector<16xi32>, %dkv: memref<?x1x576xf32>, %g: index) kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    smla_gpu.warp_specialize roles ["a", "b", "c"] registers [24, 240, 240] {
      // expected-error @+1 {{expects one slot per fragment element}}
      smla_gpu.reduce_dkv %p slots(%s : vector<16xi32>) into %dkv[%g] {col = 0 : i64} : vector<32xf32>, memref<?x1x576xf32>
    }, {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @fragment_outside(%f: vector<32xf32>) kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    %tile = memref.alloca() : memref<64x64xbf16, #gpu.address_space<workgroup>>
    smla_gpu.warp_specialize roles ["a", "b", "c"] registers [24, 240, 240] {
      // expected-error @+1 {{writes outside its tile}}
      smla_gpu.store_fragment %f into %tile {row = 0 : i64, col = 8 : i64} : vector<32xf32>, memref<64x64xbf16, #gpu.address_space<workgroup>>
    }, {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @rows_outside(%f: vector<32xf32>, %dq: memref<?x64x96xbf16>, %t: index) kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    %c0 = arith.constant 0 : index
    smla_gpu.warp_specialize roles ["a", "b", "c"] registers [24, 240, 240] {
      // expected-error @+1 {{writes outside the rows of its destination}}
      smla_gpu.store_rows %f into %dq[%t, %c0] {col = 64 : i64} : vector<32xf32>, memref<?x64x96xbf16>
    }, {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @register_a_mn(%a: vector<16xi32>) kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    %keys = memref.alloca() {alignment = 1024 : i64} : memref<64x128xbf16, #gpu.address_space<workgroup>>
    smla_gpu.warp_specialize roles ["a", "b", "c"] registers [24, 240, 240] {
      // expected-error @+1 {{expects a register A to be k-major}}
      %d = smla_gpu.wgmma a_regs(%a : vector<16xi32>) b_tile(%keys : memref<64x128xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 64 : i64, a_major = "mn", b_major = "mn", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 0 : i64} -> vector<32xf32>
    }, {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @k_extent(%a: vector<16xi32>) kernel attributes {known_block_size = array<i32: 384, 1, 1>} {
    %keys = memref.alloca() {alignment = 1024 : i64} : memref<64x128xbf16, #gpu.address_space<workgroup>>
    smla_gpu.warp_specialize roles ["a", "b", "c"] registers [24, 240, 240] {
      // expected-error @+1 {{expects a k extent that is a multiple of 16}}
      %d = smla_gpu.wgmma a_tile(%keys : memref<64x128xbf16, #gpu.address_space<workgroup>>) b_tile(%keys : memref<64x128xbf16, #gpu.address_space<workgroup>>) {n = 64 : i64, k_extent = 40 : i64, a_major = "k", b_major = "k", a_row = 0 : i64, a_col = 0 : i64, b_row = 0 : i64, b_col = 0 : i64} -> vector<32xf32>
    }, {
      %x = arith.constant 0 : index
    }, {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}

// -----

gpu.module @m {
  gpu.func @one_role() kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
    // expected-error @+1 {{expects at least two roles, got 1}}
    smla_gpu.warp_specialize roles ["a"] registers [240] {
      %x = arith.constant 0 : index
    }
    gpu.return
  }
}
