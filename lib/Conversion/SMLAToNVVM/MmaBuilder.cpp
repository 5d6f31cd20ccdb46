//===- MmaBuilder.cpp - helpers of the mma.sync lowerings -----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/MmaBuilder.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;

FragRows Mma::fragRows(Value mt, Value gr, int64_t rows) {
  FragRows r;
  r.r0 = add(mul(mt, 16), gr);
  r.r1 = add(r.r0, 8);
  r.ok0 = lt(r.r0, rows);
  r.ok1 = lt(r.r1, rows);
  r.s0 = sel(r.ok0, r.r0, c(0));
  r.s1 = sel(r.ok1, r.r1, c(0));
  return r;
}

WarpLane Mma::warpLane(Value tid) {
  WarpLane w;
  w.warp = div(tid, kMmaLanes);
  w.lane = rem(tid, kMmaLanes);
  w.gr = div(w.lane, 4);
  w.kq = mul(rem(w.lane, 4), 2);
  return w;
}

int64_t mlir::smla::mma::staticDim(Value v, int64_t i) {
  return cast<MemRefType>(v.getType()).getDimSize(i);
}

Rows mlir::smla::mma::rowsOf(Value memref) {
  auto type = cast<MemRefType>(memref.getType());
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(type.getStridesAndOffset(strides, offset)))
    strides = {ShapedType::kDynamic, type.getDimSize(2), 1};
  bool shared =
      gpu::GPUDialect::isWorkgroupMemoryAddressSpace(type.getMemorySpace());
  return {strides[0], strides[1], shared ? 3u : 1u};
}

bool mlir::smla::mma::addressable(Value memref) {
  auto type = cast<MemRefType>(memref.getType());
  SmallVector<int64_t> strides;
  int64_t offset;
  return succeeded(type.getStridesAndOffset(strides, offset)) &&
         offset == 0 && strides.size() == 3 && strides[2] == 1 &&
         !ShapedType::isDynamic(strides[0]) &&
         !ShapedType::isDynamic(strides[1]) && strides[1] % 2 == 0;
}
