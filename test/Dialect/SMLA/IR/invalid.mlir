// RUN: smla-opt %s -split-input-file -verify-diagnostics

// Every verifier error of smla.sparse_attention_bwd, with its message.

func.func @q_heads(%q: memref<?x8x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'q' dimension 1 must be 16, got 8 (type 'memref<?x8x576xbf16>')}}
  smla.sparse_attention_bwd q(%q : memref<?x8x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @q_width(%q: memref<?x16x512xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'q' dimension 2 must be 576, got 512}}
  smla.sparse_attention_bwd q(%q : memref<?x16x512xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @kv_groups(%q: memref<?x16x576xbf16>, %kv: memref<?x2x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'kv' dimension 1 must be 1, got 2}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x2x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @kv_dynamic_width(%q: memref<?x16x576xbf16>, %kv: memref<?x1x?xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'kv' dimension 2 must be 576, got ?}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x?xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @o_width(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x576xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'o' dimension 2 must be 512, got 576}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x576xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @dout_heads(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x20x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'dout' dimension 1 must be 16, got 20}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x20x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @indices_groups(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x2x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'indices' dimension 1 must be 1, got 2}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x2x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @lse_heads(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x15xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'lse' dimension 1 must be 16, got 15}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x15xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @dq_width(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x64xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'dq' dimension 2 must be 576, got 64}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x64xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @dq_type(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xf32>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'dq' element type must be the config's dqType 'bf16', got 'f32'}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xf32>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @acc_width(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x512xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'dkv_accum' dimension 2 must be 576, got 512}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x512xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @dkv_missing(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>) {
  // expected-error @+1 {{operand 'dkv' must be present when the config's dkvType is 'bf16'}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @dkv_extra(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'dkv' must be absent when the config's dkvType is 'f32'}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = f32>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @dkv_shape(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x512xbf16>) {
  // expected-error @+1 {{operand 'dkv' dimension 2 must be 576, got 512}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x512xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @positions_missing(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'positions' must be present when the config says positions = true}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = true, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @positions_extra(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %pos: memref<?xi32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{operand 'positions' must be absent when the config says positions = false}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) positions(%pos : memref<?xi32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @counters_size(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %cnt: memref<3xi64>) {
  // expected-error @+1 {{operand 'counters' dimension 0 must be 4, got 3}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) counters(%cnt : memref<3xi64>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @tokens_differ(%q: memref<8x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<9x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{token count (dim 0) differs between 'q' (8) and 'lse' (9)}}
  smla.sparse_attention_bwd q(%q : memref<8x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<9x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @keys_differ(%q: memref<?x16x576xbf16>, %kv: memref<100x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<99x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{key count (dim 0) differs between 'kv' (100) and 'dkv_accum' (99)}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<100x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<99x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @scale_zero(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{sm_scale must be finite and > 0, got 0}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0 : f32}
  return
}

// -----

func.func @scale_negative(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{sm_scale must be finite and > 0, got -1}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = -1.0 : f32}
  return
}

// -----

func.func @scale_inf(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>) {
  // expected-error @+1 {{sm_scale must be finite and > 0, got INF}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0x7F800000 : f32}
  return
}

// -----

func.func @q_rank(%q: memref<16x576xbf16>) {
  // expected-error @+1 {{operand #0 must be 3D memref of bfloat16 type values, but got 'memref<16x576xbf16>'}}
  smla.sparse_attention_bwd q(%q : memref<16x576xbf16>) kv(%q : memref<16x576xbf16>) o(%q : memref<16x576xbf16>) dout(%q : memref<16x576xbf16>) indices(%q : memref<16x576xbf16>) lse(%q : memref<16x576xbf16>) dq(%q : memref<16x576xbf16>) dkv_accum(%q : memref<16x576xbf16>) {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = f32>, sm_scale = 1.0 : f32}
  return
}

// -----

func.func @indices_type(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %idx: memref<?x1x?xi64>, %lse: memref<?x16xf32>, %acc: memref<?x1x576xf32>) {
  // expected-error @+1 {{operand #4 must be 3D memref of 32-bit signless integer values, but got 'memref<?x1x?xi64>'}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%o : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi64>) lse(%lse : memref<?x16xf32>) dq(%q : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = f32>, sm_scale = 1.0 : f32}
  return
}

// -----

func.func @delta_heads(%q: memref<?x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %delta: memref<?x8xf32>) {
  // expected-error @+1 {{operand 'delta' dimension 1 must be 16, got 8}}
  smla.sparse_attention_bwd q(%q : memref<?x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) delta(%delta : memref<?x8xf32>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @delta_tokens(%q: memref<8x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %delta: memref<4x16xf32>) {
  // expected-error @+1 {{token count (dim 0) differs between 'q' (8) and 'delta' (4)}}
  smla.sparse_attention_bwd q(%q : memref<8x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) delta(%delta : memref<4x16xf32>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @topk_length_pairs(%q: memref<?x32x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x32x512xbf16>, %do: memref<?x32x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x32xf32>, %dq: memref<?x32x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %len: memref<?xi32>) {
  // expected-error @+1 {{operand 'topk_length' needs a step of one token (config tokens = 1), got tokens = 2}}
  smla.sparse_attention_bwd q(%q : memref<?x32x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x32x512xbf16>) dout(%do : memref<?x32x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x32xf32>) dq(%dq : memref<?x32x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) topk_length(%len : memref<?xi32>)
      {config = #smla.config<d = 512, dt = 64, heads = 32, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16, tokens = 2>, sm_scale = 0.0416666679 : f32}
  return
}

// -----

func.func @topk_length_tokens(%q: memref<8x16x576xbf16>, %kv: memref<?x1x576xbf16>, %o: memref<?x16x512xbf16>, %do: memref<?x16x512xbf16>, %idx: memref<?x1x?xi32>, %lse: memref<?x16xf32>, %dq: memref<?x16x576xbf16>, %acc: memref<?x1x576xf32>, %dkv: memref<?x1x576xbf16>, %len: memref<7xi32>) {
  // expected-error @+1 {{token count (dim 0) differs between 'q' (8) and 'topk_length' (7)}}
  smla.sparse_attention_bwd q(%q : memref<8x16x576xbf16>) kv(%kv : memref<?x1x576xbf16>) o(%o : memref<?x16x512xbf16>) dout(%do : memref<?x16x512xbf16>) indices(%idx : memref<?x1x?xi32>) lse(%lse : memref<?x16xf32>) dq(%dq : memref<?x16x576xbf16>) dkv_accum(%acc : memref<?x1x576xf32>) dkv(%dkv : memref<?x1x576xbf16>) topk_length(%len : memref<7xi32>)
      {config = #smla.config<d = 512, dt = 64, heads = 16, groups = 1, block = 64, lseBase = base2, positions = false, dqType = bf16, dkvType = bf16>, sm_scale = 0.0416666679 : f32}
  return
}
