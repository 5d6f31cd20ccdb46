// RUN: smla-opt %s -split-input-file --smla-lower-to-loops | FileCheck %s
// The lowered guards still satisfy the guard verifier.
// RUN: smla-opt %s -split-input-file --smla-lower-to-loops --smla-verify-guards > /dev/null

// CHECK-LABEL: func.func @index_load
// CHECK-SAME: (%[[IDXS:[a-z0-9_]+]]: memref<?x1x?xi32>, %[[T:[a-z0-9_]+]]: index, %[[K0:[a-z0-9_]+]]: index)
// The tail block is never read past: a masked load under min(K - k0, 16)
// whose masked-off lanes are -1.
// CHECK: %[[K:[a-z0-9_]+]] = memref.dim %[[IDXS]], %{{.*}} : memref<?x1x?xi32>
// CHECK: %[[LEFT:[a-z0-9_]+]] = arith.subi %[[K]], %[[K0]] : index
// CHECK: %[[C16:[a-z0-9_]+]] = arith.constant 16 : index
// CHECK: %[[N:[a-z0-9_]+]] = arith.minsi %[[LEFT]], %[[C16]] : index
// CHECK: %[[IN:[a-z0-9_]+]] = vector.create_mask %[[N]] : vector<16xi1>
// CHECK: %[[PAD:[a-z0-9_]+]] = arith.constant dense<-1> : vector<16xi32>
// CHECK: %[[V:[a-z0-9_]+]] = vector.maskedload %[[IDXS]][%[[T]], %[[T]], %[[K0]]], %[[IN]], %[[PAD]]
// CHECK: return %[[V]]
func.func @index_load(%idxs: memref<?x1x?xi32>, %t: index, %k0: index) -> vector<16xi32> {
  %i = smla.index_load %idxs[%t, %t, %k0] : memref<?x1x?xi32> -> vector<16xi32>
  return %i : vector<16xi32>
}

// -----

// CHECK-LABEL: func.func @index_mask
// CHECK-SAME: (%[[I:[a-z0-9_]+]]: vector<16xi32>, %[[S:[a-z0-9_]+]]: index, %[[N:[a-z0-9_]+]]: index, %[[LIM:[a-z0-9_]+]]: i32, %[[CNT:[a-z0-9_]+]]: memref<4xi64>)
// The exact validity predicate: 0 <= idx < S_kv, lane < lanes, idx <= limit.
// CHECK: %[[IX:[a-z0-9_]+]] = arith.index_cast %[[I]] : vector<16xi32> to vector<16xindex>
// CHECK: %[[LANE:[a-z0-9_]+]] = vector.step : vector<16xindex>
// CHECK: %[[Z:[a-z0-9_]+]] = vector.broadcast %{{.*}} : index to vector<16xindex>
// CHECK: %[[GE:[a-z0-9_]+]] = arith.cmpi sge, %[[IX]], %[[Z]] : vector<16xindex>
// CHECK: %[[SB:[a-z0-9_]+]] = vector.broadcast %[[S]] : index to vector<16xindex>
// CHECK: %[[LT:[a-z0-9_]+]] = arith.cmpi slt, %[[IX]], %[[SB]] : vector<16xindex>
// CHECK: %[[NB:[a-z0-9_]+]] = vector.broadcast %[[N]] : index to vector<16xindex>
// CHECK: %[[INL:[a-z0-9_]+]] = arith.cmpi slt, %[[LANE]], %[[NB]] : vector<16xindex>
// CHECK: %[[A:[a-z0-9_]+]] = arith.andi %[[GE]], %[[LT]] : vector<16xi1>
// CHECK: %[[B:[a-z0-9_]+]] = arith.andi %[[A]], %[[INL]] : vector<16xi1>
// CHECK: %[[L:[a-z0-9_]+]] = arith.index_cast %[[LIM]] : i32 to index
// CHECK: %[[LB:[a-z0-9_]+]] = vector.broadcast %[[L]] : index to vector<16xindex>
// CHECK: %[[LE:[a-z0-9_]+]] = arith.cmpi sle, %[[IX]], %[[LB]] : vector<16xindex>
// CHECK: %[[VALID:[a-z0-9_]+]] = arith.andi %[[B]], %[[LE]] : vector<16xi1>
// Invalid real lanes are counted into counters[0].
// CHECK: %[[INV:[a-z0-9_]+]] = arith.xori %[[VALID]], %{{.*}} : vector<16xi1>
// CHECK: %[[REAL:[a-z0-9_]+]] = arith.andi %[[INV]], %[[INL]] : vector<16xi1>
// CHECK: %[[W:[a-z0-9_]+]] = arith.extui %[[REAL]] : vector<16xi1> to vector<16xi64>
// CHECK: %[[SUM:[a-z0-9_]+]] = vector.reduction <add>, %[[W]] : vector<16xi64> into i64
// CHECK: memref.load %[[CNT]][%c0{{.*}}] : memref<4xi64>
// CHECK: memref.store %{{.*}}, %[[CNT]][%c0{{.*}}] : memref<4xi64>
// CHECK: return %[[VALID]]
func.func @index_mask(%i: vector<16xi32>, %s: index, %n: index, %lim: i32, %cnt: memref<4xi64>) -> vector<16xi1> {
  %m = smla.index_mask %i below %s lanes %n limit %lim counters(%cnt : memref<4xi64>)
      : vector<16xi32> -> vector<16xi1>
  return %m : vector<16xi1>
}

// -----

// CHECK-LABEL: func.func @row_live
// CHECK: %[[LSE:[a-z0-9_]+]] = vector.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x4xf32>, vector<2xf32>
// CHECK: %[[MAG:[a-z0-9_]+]] = math.absf %[[LSE]] : vector<2xf32>
// CHECK: %[[INF:[a-z0-9_]+]] = arith.constant dense<0x7F800000> : vector<2xf32>
// Ordered less-than: +inf, -inf and NaN are all dead.
// CHECK: %[[LIVE:[a-z0-9_]+]] = arith.cmpf olt, %[[MAG]], %[[INF]] : vector<2xf32>
// CHECK: return %[[LIVE]]
func.func @row_live(%lse: memref<?x4xf32>, %t: index, %g: index) -> vector<2xi1> {
  %l = smla.row_live %lse[%t, %g] : memref<?x4xf32> -> vector<2xi1>
  return %l : vector<2xi1>
}

// -----

// CHECK-LABEL: func.func @gather
// CHECK-SAME: (%[[KV:[a-z0-9_]+]]: memref<?x1x48xbf16>, %[[I:[a-z0-9_]+]]: vector<16xi32>, %[[M:[a-z0-9_]+]]: vector<16xi1>, %[[G:[a-z0-9_]+]]: index, %[[TILE:[a-z0-9_]+]]: memref<16x48xbf16>)
// CHECK: scf.for %[[J:[a-z0-9_]+]] =
// CHECK:   %[[OK:[a-z0-9_]+]] = vector.extract %[[M]][%[[J]]] : i1 from vector<16xi1>
// CHECK:   scf.if %[[OK]] {
// Only inside the valid branch does an index become an address.
// CHECK:     %[[RAW:[a-z0-9_]+]] = vector.extract %[[I]][%[[J]]] : i32 from vector<16xi32>
// CHECK:     %[[ROW:[a-z0-9_]+]] = arith.index_cast %[[RAW]] : i32 to index
// CHECK:     %[[V:[a-z0-9_]+]] = memref.load %[[KV]][%[[ROW]], %[[G]], %{{.*}}] : memref<?x1x48xbf16>
// CHECK-NEXT: memref.store %[[V]], %[[TILE]]
// CHECK:   } else {
// Masked lanes read zero.
// CHECK-NOT:   memref.load
// CHECK:     memref.store %{{.*}}, %[[TILE]][%[[J]], %{{.*}}] : memref<16x48xbf16>
// CHECK:   }
func.func @gather(%kv: memref<?x1x48xbf16>, %i: vector<16xi32>, %m: vector<16xi1>, %g: index, %tile: memref<16x48xbf16>) {
  smla.gather %kv[%g] rows(%i) mask(%m : vector<16xi1>) into %tile
      : memref<?x1x48xbf16>, vector<16xi32>, memref<16x48xbf16>
  return
}

// -----

// CHECK-LABEL: func.func @softmax
// CHECK-SAME: (%[[S:[a-z0-9_]+]]: memref<2x16xf32>, %[[LSE:[a-z0-9_]+]]: memref<?x4xf32>, %{{.*}}: index, %{{.*}}: index, %[[M:[a-z0-9_]+]]: vector<16xi1>, %[[L:[a-z0-9_]+]]: vector<2xi1>, %[[P:[a-z0-9_]+]]: memref<2x16xf32>)
// CHECK: scf.for %[[H:[a-z0-9_]+]] =
// CHECK:   %[[LSEV:[a-z0-9_]+]] = memref.load %[[LSE]]
// A natural-log lse is converted to base 2.
// CHECK:   %[[LSE2:[a-z0-9_]+]] = arith.mulf %[[LSEV]], %{{.*}} : f32
// CHECK:   %[[LIVE:[a-z0-9_]+]] = vector.extract %[[L]][%[[H]]] : i1 from vector<2xi1>
// CHECK:   scf.for %[[J:[a-z0-9_]+]] =
// CHECK:     %[[X2:[a-z0-9_]+]] = arith.subf %{{.*}}, %[[LSE2]] : f32
// The clamp, the exponential, and the select that zeroes dead rows and
// invalid lanes (never a multiply by the mask).
// CHECK:     %[[CL:[a-z0-9_]+]] = arith.constant 3.200000e+01 : f32
// CHECK:     %[[XC:[a-z0-9_]+]] = arith.minimumf %[[X2]], %[[CL]] : f32
// CHECK:     %[[E:[a-z0-9_]+]] = math.exp2 %[[XC]] : f32
// CHECK:     %[[MJ:[a-z0-9_]+]] = vector.extract %[[M]][%[[J]]] : i1 from vector<16xi1>
// CHECK:     %[[OK:[a-z0-9_]+]] = arith.andi %[[MJ]], %[[LIVE]] : i1
// CHECK:     %[[PV:[a-z0-9_]+]] = arith.select %[[OK]], %[[E]], %{{.*}} : f32
// CHECK:     %[[OVER:[a-z0-9_]+]] = arith.cmpf ogt, %[[X2]], %[[CL]] : f32
// CHECK:     memref.store %[[PV]], %[[P]][%[[H]], %[[J]]] : memref<2x16xf32>
// CHECK-NOT: arith.mulf %[[E]]
func.func @softmax(%s: memref<2x16xf32>, %lse: memref<?x4xf32>, %t: index, %g: index, %m: vector<16xi1>, %l: vector<2xi1>, %p: memref<2x16xf32>) {
  smla.softmax %s, %lse[%t, %g] mask(%m : vector<16xi1>) live(%l : vector<2xi1>) into %p
      {base = #smla<lse_base natural>, clamp = 32.0 : f32, scale = 0.125 : f32}
      : memref<2x16xf32>, memref<?x4xf32>, memref<2x16xf32>
  return
}

// -----

// CHECK-LABEL: func.func @dscores
// CHECK: %[[DIFF:[a-z0-9_]+]] = arith.subf
// CHECK: %[[PD:[a-z0-9_]+]] = arith.mulf %{{.*}}, %[[DIFF]] : f32
// CHECK: %[[DS:[a-z0-9_]+]] = arith.mulf %[[PD]], %{{.*}} : f32
// P == 0 gives exactly 0, whatever dP and Delta are.
// CHECK: %[[NZ:[a-z0-9_]+]] = arith.cmpf one, %{{.*}}, %{{.*}} : f32
// CHECK: arith.select %[[NZ]], %[[DS]], %{{.*}} : f32
func.func @dscores(%p: memref<2x16xf32>, %d: memref<2xf32>) {
  smla.dscores %p, %p, %d into %p {scale = 0.5 : f32}
      : memref<2x16xf32>, memref<2x16xf32>, memref<2xf32>, memref<2x16xf32>
  return
}

// -----

// CHECK-LABEL: func.func @scatter
// CHECK-SAME: %[[I:[a-z0-9]+]]: vector<16xi32>, %[[M:[a-z0-9]+]]: vector<16xi1>, %[[ACC:[a-z0-9]+]]: memref<?x1x48xf32>)
// CHECK: scf.for %[[J:[a-z0-9_]+]] =
// CHECK:   %[[OK:[a-z0-9_]+]] = vector.extract %[[M]][%[[J]]] : i1 from vector<16xi1>
// A masked lane writes nothing: there is no else branch.
// CHECK:   scf.if %[[OK]] {
// CHECK:     %[[RAW:[a-z0-9_]+]] = vector.extract %[[I]][%[[J]]] : i32 from vector<16xi32>
// CHECK:     %[[ROW:[a-z0-9_]+]] = arith.index_cast %[[RAW]] : i32 to index
// dS * q over the full width ...
// CHECK:     scf.for %{{.*}} = %{{.*}} to %c48
// CHECK:       memref.store %{{.*}}, %[[ACC]][%[[ROW]], %{{.*}}, %{{.*}}] : memref<?x1x48xf32>
// ... then P * do over the first D = 32 columns.
// CHECK:     scf.for %{{.*}} = %{{.*}} to %c32
// CHECK:       memref.store %{{.*}}, %[[ACC]][%[[ROW]], %{{.*}}, %{{.*}}] : memref<?x1x48xf32>
// CHECK-NOT: } else {
func.func @scatter(%ds: memref<4x16xf32>, %q: memref<?x4x48xbf16>, %do: memref<?x4x32xbf16>, %t: index, %i: vector<16xi32>, %m: vector<16xi1>, %acc: memref<?x1x48xf32>) {
  smla.scatter_dkv %ds, %ds, %q, %do[%t, %t] rows(%i) mask(%m : vector<16xi1>) into %acc[%t]
      : memref<4x16xf32>, memref<?x4x48xbf16>, memref<?x4x32xbf16>, vector<16xi32>, memref<?x1x48xf32>
  return
}

// -----

// bf16 outputs are rounded by arith.truncf.
// CHECK-LABEL: func.func @store_and_cast
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: memref.store %{{.*}} : memref<?x4x48xbf16>
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: memref.store %{{.*}} : memref<?x1x48xbf16>
// CHECK-NOT: smla.
func.func @store_and_cast(%acc: memref<4x48xf32>, %dq: memref<?x4x48xbf16>, %t: index, %a: memref<?x1x48xf32>, %dkv: memref<?x1x48xbf16>) {
  smla.store_dq %acc into %dq[%t, %t] : memref<4x48xf32>, memref<?x4x48xbf16>
  smla.cast_dkv %a into %dkv : memref<?x1x48xf32>, memref<?x1x48xbf16>
  return
}

// -----

// The non-finite row guard: each stored row ORs !(|v| < inf) over its
// values, as stored (bf16 widened back), and adds that bit to counters[3].
// CHECK-LABEL: func.func @store_and_cast_counted
// CHECK-SAME: %[[CNT:[a-z0-9_]+]]: memref<4xi64>
// CHECK: %[[INF:[a-z0-9_]+]] = arith.constant 0x7F800000 : f32
// CHECK: %[[BAD:[a-z0-9_]+]] = scf.for {{.*}} iter_args(%[[ACC:[a-z0-9_]+]] = %false) -> (i1)
// CHECK:   %[[R:[a-z0-9_]+]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK:   memref.store %[[R]], %{{.*}} : memref<?x4x48xbf16>
// CHECK:   %[[W:[a-z0-9_]+]] = arith.extf %[[R]] : bf16 to f32
// CHECK:   %[[ABS:[a-z0-9_]+]] = math.absf %[[W]] : f32
// CHECK:   %[[FIN:[a-z0-9_]+]] = arith.cmpf olt, %[[ABS]], %[[INF]] : f32
// CHECK:   %[[NOT:[a-z0-9_]+]] = arith.xori %[[FIN]], %true : i1
// CHECK:   %[[OR:[a-z0-9_]+]] = arith.ori %[[ACC]], %[[NOT]] : i1
// CHECK:   scf.yield %[[OR]] : i1
// CHECK: %[[C3:[a-z0-9_]+]] = arith.constant 3 : index
// CHECK: %[[OLD:[a-z0-9_]+]] = memref.load %[[CNT]][%[[C3]]] : memref<4xi64>
// CHECK: %[[ONE:[a-z0-9_]+]] = arith.extui %[[BAD]] : i1 to i64
// CHECK: %[[NEW:[a-z0-9_]+]] = arith.addi %[[OLD]], %[[ONE]] : i64
// CHECK: memref.store %[[NEW]], %[[CNT]][%[[C3]]] : memref<4xi64>
// The bf16 dkv is counted as stored ...
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: memref.store %{{.*}} : memref<?x1x48xbf16>
// CHECK: math.absf
// CHECK: memref.store %{{.*}}, %[[CNT]][%{{.*}}] : memref<4xi64>
// ... and an f32 result only read and counted.
// CHECK: %[[V:[a-z0-9_]+]] = memref.load %{{.*}} : memref<?x1x48xf32>
// CHECK-NOT: memref.store %{{.*}} : memref<?x1x48xf32>
// CHECK: math.absf %[[V]] : f32
// CHECK: memref.store %{{.*}}, %[[CNT]][%{{.*}}] : memref<4xi64>
// CHECK-NOT: smla.
func.func @store_and_cast_counted(%acc: memref<4x48xf32>, %dq: memref<?x4x48xbf16>, %t: index, %a: memref<?x1x48xf32>, %dkv: memref<?x1x48xbf16>, %cnt: memref<4xi64>) {
  smla.store_dq %acc into %dq[%t, %t] counters(%cnt : memref<4xi64>) : memref<4x48xf32>, memref<?x4x48xbf16>
  smla.cast_dkv %a into %dkv counters(%cnt : memref<4xi64>) : memref<?x1x48xf32>, memref<?x1x48xbf16>
  smla.cast_dkv %a counters(%cnt : memref<4xi64>) : memref<?x1x48xf32>
  return
}
