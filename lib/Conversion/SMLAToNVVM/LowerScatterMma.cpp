//===- LowerScatterMma.cpp - scatter_dkv on tensor cores ------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//   scatter_dkv    dkv[idx[j], c] += sum_h bf16(ds[h, j]) * q[h, c]
//                                  + sum_h bf16(p[h, j]) * do[h, c]
//                  M = slots, N = columns, K = heads (padded to 16);
//                  A = dS^T / P^T (shared f32, transposed while packing),
//                  B = q / do rows (32-bit loads, see below).
//
// Padded head rows (h >= Hg) never form an address outside this token's
// rows: their loads go to row 0 of the head block and are replaced by zero.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/MmaBuilder.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;

namespace mlir::smla {

bool canUseMma(ScatterDkvOp op, int64_t threads) {
  auto q = op.getQ().getType(), dout = op.getDout().getType();
  auto dkv = op.getDkv().getType();
  int64_t block = op.getDs().getType().getDimSize(1);
  int64_t width = dkv.getDimSize(2), d = dout.getDimSize(2);
  int64_t warps = threads / kMmaLanes;
  return addressable(op.getQ()) && addressable(op.getDout()) &&
         !q.isDynamicDim(1) && !q.isDynamicDim(2) && !dout.isDynamicDim(1) &&
         !dout.isDynamicDim(2) && !dkv.isDynamicDim(1) &&
         !dkv.isDynamicDim(2) && q.getDimSize(2) == width &&
         q.getDimSize(1) == dout.getDimSize(1) && width % 16 == 0 &&
         d % 16 == 0 && d <= width && block % 16 == 0 &&
         warps % (block / 16) == 0;
}

/// The B operand of scatter_dkv is q (or do) with K = heads, but q is
/// stored head-major, so a bf16 pair along K is two rows apart. Instead of
/// staging q transposed, each lane loads the 32-bit pairs q[h][c0 + 2gr,
/// c0 + 2gr + 1] for its four heads h = kq, kq+1, kq+8, kq+9 and splits
/// them: the low halves are the B fragment of n8 tile "even" (columns
/// c0 + 2n), the high halves that of tile "odd" (columns c0 + 2n + 1). The
/// C fragments of the two tiles then hold, per row, the four consecutive
/// columns c0 + 4 (lane % 4) + {0, 1, 2, 3}: one red.global.add.v4.f32.
void lowerScatterDkvMma(CtaEmitter &e, ScatterDkvOp op, const LaneFn &mask,
                        const LaneFn &index) {
  Mma m{e.b, e.loc};
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t hg = op.getDs().getType().getDimSize(0);
  int64_t block = op.getDs().getType().getDimSize(1);
  int64_t heads = staticDim(op.getQ(), 1), width = staticDim(op.getQ(), 2);
  int64_t d = staticDim(op.getDout(), 2);
  int64_t mTiles = block / 16, kTiles = llvm::divideCeil(hg, 16);
  int64_t warps = e.threads / kMmaLanes, stride = warps / mTiles;
  int64_t groups16 = width / 16;

  WarpLane w = m.warpLane(e.tid);
  Value warp = w.warp, gr = w.gr, kq = w.kq;
  Value zi = m.zeroI32();
  // Each warp keeps one m tile (16 slots) for the whole op.
  Value j0 = m.add(m.mul(m.rem(warp, mTiles), 16), gr), j1 = m.add(j0, 8);

  // A fragments (per k tile): rows (j0, j1) x heads (kq, kq+8) as pairs,
  // A[j][h] = tile[h][j]; heads >= Hg are zero.
  auto aFrag = [&](Value tile, int64_t kt) {
    SmallVector<Value> regs;
    for (int64_t kk : {0, 8})
      for (Value j : {j0, j1}) {
        SmallVector<Value> pair;
        for (int64_t i = 0; i < 2; ++i) {
          Value h = m.add(m.add(kq, kt * 16 + kk), i);
          Value ok = m.lt(h, hg);
          Value x = memref::LoadOp::create(b, loc, tile,
                                           ValueRange{m.sel(ok, h, m.c(0)), j});
          pair.push_back(m.sel(ok, x, m.zeroF32()));
        }
        regs.push_back(m.packBf16(vector::FromElementsOp::create(
            b, loc, VectorType::get({2}, b.getF32Type()), pair)));
      }
    // regs are (kq, j0), (kq, j1), (kq+8, j0), (kq+8, j1): a0..a3.
    return regs;
  };
  SmallVector<SmallVector<Value>> aDs, aP;
  for (int64_t kt = 0; kt < kTiles; ++kt) {
    aDs.push_back(aFrag(op.getDs(), kt));
    aP.push_back(aFrag(op.getProbs(), kt));
  }

  // Byte address of this lane's pair in row h of the token's q / do heads,
  // column 2 gr (heads >= Hg load from the group's first row, then zero).
  (void)heads;
  struct RowPtr {
    Value addr, ok;
    unsigned as;
  };
  auto rowPtrs = [&](Value memref, int64_t kt) {
    SmallVector<RowPtr> out;
    Rows rows = rowsOf(memref);
    Value base = m.base(memref);
    Value first = m.add(m.mul(op.getToken(), rows.tokenStride),
                        m.mul(m.mul(op.getHeadBlock(), hg), rows.rowStride));
    for (int64_t kk : {0, 1, 8, 9}) {
      Value h = m.add(kq, kt * 16 + kk);
      Value ok = m.lt(h, hg);
      Value elem = m.add(m.add(first, m.mul(m.sel(ok, h, m.c(0)),
                                            rows.rowStride)),
                         m.mul(gr, 2));
      out.push_back({m.add(base, m.mul(elem, 2)), ok, rows.addressSpace});
    }
    return out;
  };
  SmallVector<SmallVector<RowPtr>> qRows, doRows;
  for (int64_t kt = 0; kt < kTiles; ++kt) {
    qRows.push_back(rowPtrs(op.getQ(), kt));
    doRows.push_back(rowPtrs(op.getDout(), kt));
  }

  Value valid0 = mask(b, loc, j0), valid1 = mask(b, loc, j1);
  Value raw0 = index(b, loc, j0), raw1 = index(b, loc, j1);

  auto i32c = [&](int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
  };
  // acc (even tile c0..c3, odd tile c0..c3) += A * B for the 16 columns
  // at byte offset colBytes of the rows.
  auto product = [&](ArrayRef<SmallVector<Value>> a,
                     ArrayRef<SmallVector<RowPtr>> rows, Value colBytes,
                     ValueRange acc) {
    SmallVector<Value> even(acc.take_front(4)), odd(acc.drop_front(4));
    for (int64_t kt = 0; kt < kTiles; ++kt) {
      SmallVector<Value> x;
      for (const RowPtr &r : rows[kt])
        x.push_back(
            m.sel(r.ok, m.loadI32(m.add(r.addr, colBytes), r.as), zi));
      // One prmt each: bytes {k1.1, k1.0, k0.1, k0.0} (selector 0x5410)
      // and {k1.3, k1.2, k0.3, k0.2} (0x7632).
      auto permute = [&](Value k0, Value k1, int32_t selector) -> Value {
        return NVVM::PermuteOp::create(b, loc, b.getI32Type(), k0, k1,
                                       i32c(selector),
                                       NVVM::PermuteMode::DEFAULT);
      };
      auto evenOf = [&](Value k0, Value k1) { return permute(k0, k1, 0x5410); };
      auto oddOf = [&](Value k0, Value k1) { return permute(k0, k1, 0x7632); };
      even = m.mma(a[kt], {evenOf(x[0], x[1]), evenOf(x[2], x[3])}, even);
      odd = m.mma(a[kt], {oddOf(x[0], x[1]), oddOf(x[2], x[3])}, odd);
    }
    even.append(odd);
    return even;
  };

  Value first = m.div(warp, mTiles);
  scf::ForOp::create(
      b, loc, first, m.c(groups16), m.c(stride), ValueRange{},
      [&](OpBuilder &nb, Location l, Value cg, ValueRange) {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        Value c0 = m.mul(cg, 16);
        Value colBytes = m.mul(c0, 2);
        Value z = m.zeroF32();
        SmallVector<Value> acc =
            product(aDs, qRows, colBytes, ValueRange{z, z, z, z, z, z, z, z});
        // Columns < D also get P^T . dO (D is a multiple of 16).
        auto withV = scf::IfOp::create(
            b, loc, TypeRange(ValueRange(acc)), m.lt(c0, d),
            /*withElseRegion=*/true);
        {
          OpBuilder::InsertionGuard g2(b);
          b.setInsertionPointToStart(&withV.getThenRegion().front());
          scf::YieldOp::create(b, loc, product(aP, doRows, colBytes, acc));
          b.setInsertionPointToStart(&withV.getElseRegion().front());
          scf::YieldOp::create(b, loc, acc);
        }
        ValueRange r = withV.getResults();
        Value col = m.add(c0, m.mul(kq, 2));
        emitMaskedRed(b, loc, op.getDkv(), op.getGroup(), valid0, raw0, col,
                        ValueRange{r[0], r[4], r[1], r[5]});
        emitMaskedRed(b, loc, op.getDkv(), op.getGroup(), valid1, raw1, col,
                        ValueRange{r[2], r[6], r[3], r[7]});
        scf::YieldOp::create(b, l);
      });
}


} // namespace mlir::smla
