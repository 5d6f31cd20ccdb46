// RUN: smla-opt %s -split-input-file -verify-diagnostics

// Impossible configurations are refused by the attribute verifier.

// expected-error @+1 {{d must be a positive multiple of 16, got 500}}
func.func private @f() attributes {c = #smla.config<d = 500, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}

// -----

// expected-error @+1 {{d must be a positive multiple of 16, got 0}}
func.func private @f() attributes {c = #smla.config<d = 0, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}

// -----

// expected-error @+1 {{dt must be a non-negative multiple of 16, got 40}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 40, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}

// -----

// expected-error @+1 {{heads must be >= 1, got 0}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 0, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}

// -----

// expected-error @+1 {{groups must be >= 1, got 0}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 16, groups = 0, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}

// -----

// expected-error @+1 {{heads (20) must be divisible by groups (3)}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 20, groups = 3, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}

// -----

// expected-error @+1 {{block must be a multiple of 16 in [16, 256], got 24}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 24, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}

// -----

// expected-error @+1 {{block must be a multiple of 16 in [16, 256], got 512}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 512, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>}

// -----

// expected-error @+1 {{dqType must be bf16 or f32, got 'f16'}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = f16, dkvType = bf16>}

// -----

// expected-error @+1 {{dkvType must be bf16 or f32, got 'i32'}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = i32>}

// -----

// expected-error @+2 {{expected ::mlir::smla::LseBase to be one of: base2, natural}}
// expected-error @+1 {{failed to parse SMLA_ConfigAttr parameter 'lseBase'}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base10, positions = false, dqType = bf16, dkvType = bf16>}

// -----

// expected-error @+1 {{struct is missing required parameter: dkvType}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16>}

// -----

// expected-error @+1 {{headBlocks (3) must be >= 1 and divide the heads per group (8)}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 16, groups = 2, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, headBlocks = 3>}

// -----

// expected-error @+1 {{tokens must be 1 or 2, got 3}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 48, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, tokens = 3>}

// -----

// expected-error @+1 {{tokens = 2 needs groups = 1, headBlocks = 1 and heads (32) divisible by tokens}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 32, groups = 2, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, tokens = 2>}

// -----

// expected-error @+1 {{tokens = 2 needs groups = 1, headBlocks = 1 and heads (64) divisible by tokens}}
func.func private @f() attributes {c = #smla.config<d = 512, dt = 64, heads = 64, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, headBlocks = 2, tokens = 2>}
