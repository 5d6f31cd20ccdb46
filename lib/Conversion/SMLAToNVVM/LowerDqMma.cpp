//===- LowerDqMma.cpp - dq_accumulate and store_dq on tensor cores --------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//   dq_accumulate  acc[h, c] += sum_j bf16(ds[h, j]) * tile[j, c]
//                  A = dS (shared f32, rounded to bf16 and packed),
//                  B = tile (shared, ldmatrix.x4.trans: two n8 tiles),
//                  C = the accumulator: in shared memory, or, in the
//                  register form, a private f32 array per thread.
//
// The register form (the warps divide evenly among the m tiles): a warp
// keeps m tile warp % mTiles and column pairs np = warp / mTiles + i * S,
// S = warps / mTiles, for slots i < ceil(W / 16 / S); slot i keeps the 8 C
// values of its pair at [8 i, 8 i + 8) of a private array.
// Every index into the array is a constant, so LLVM promotes it to
// registers: the accumulator is never read from or written to shared
// memory. smla-gpu-map chooses it (planDqRegisters) when the accumulator
// is zero-filled and otherwise only accumulated into and stored, at most
// 8 slots (64 registers, dqRegisterSlots), and only as many as fit the
// kernel's register budget above the rest of the kernel. It marks the
// alloca (kDqRegistersAttr): the staging estimate and smla-allocate-smem
// leave it out, and smla-lower-to-nvvm follows the mark after checking it
// (checkDqRegisters).
//
// Padded head rows (h >= Hg) never form an address outside this token's
// rows: their loads go to row 0 of the head block and are replaced by
// zero, and their results are never stored.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/MmaBuilder.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;

namespace mlir::smla {

bool canUseMma(DqAccumulateOp op) {
  auto tile = op.getTile().getType();
  int64_t width = op.getAcc().getType().getDimSize(1);
  int64_t block = op.getDs().getType().getDimSize(1);
  return tile.hasStaticShape() && tile.getElementType().isBF16() &&
         width % 16 == 0 && block % 16 == 0 && tile.getDimSize(1) >= width &&
         tile.getDimSize(1) % 8 == 0 && tile.getDimSize(0) == block;
}

int64_t dqRegisterSlots(DqAccumulateOp op, int64_t threads) {
  int64_t hg = op.getAcc().getType().getDimSize(0);
  int64_t nPairs = op.getAcc().getType().getDimSize(1) / 16;
  int64_t mTiles = llvm::divideCeil(hg, 16);
  int64_t warps = threads / kMmaLanes;
  if (!canUseMma(op) || warps == 0 || warps % mTiles != 0)
    return 0;
  int64_t slots = llvm::divideCeil(nPairs, warps / mTiles);
  // At most 64 accumulator registers per thread.
  return slots * 8 <= 64 ? slots : 0;
}

bool mmaEnabled(Operation *op, bool option) {
  auto top =
      isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
  if (top)
    if (auto attr = top->getAttrOfType<BoolAttr>("smla.mma"))
      return attr.getValue();
  return option;
}

namespace {
/// The register form of dQ adds 8 registers per column pair of a warp to a
/// kernel that keeps about 88 others live (the library's H = 16 kernel: 5
/// pairs, 63 -> 124-128 registers at 256 threads and two CTAs per SM; the
/// 32-head CTA at 512 threads, one per SM: 5 pairs, 128 registers). It is
/// planned only where at least 128 are available and the pairs fit in what
/// remains above those 88 (at 128: 5 pairs; a kernel of D = 960 at H = 16,
/// 8 pairs, would spill and keeps the shared form).
constexpr int64_t kDqRegisterBudget = 128;
constexpr int64_t kDqOtherRegisters = 88;

/// Registers per thread at the CTAs per SM the kernel was mapped for.
int64_t registerBudget(gpu::GPUFuncOp func, int64_t threads) {
  auto ctas = func->getAttrOfType<IntegerAttr>(kCtasPerSmAttr);
  int64_t n = threads * (ctas ? ctas.getInt() : 1);
  return std::min(kMaxRegistersPerThread,
                  kRegistersPerSm / std::max<int64_t>(n, 1));
}
} // namespace

memref::AllocaOp rootAlloca(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto a = dyn_cast<memref::AllocaOp>(def))
      return a;
    if (auto sub = dyn_cast<memref::SubViewOp>(def))
      v = sub.getSource();
    else if (auto cast = dyn_cast<memref::CastOp>(def))
      v = cast.getSource();
    else if (auto re = dyn_cast<memref::ReinterpretCastOp>(def))
      v = re.getSource();
    else
      return {};
  }
  return {};
}

memref::AllocaOp soleRootAlloca(Value acc) {
  memref::AllocaOp a = rootAlloca(acc);
  if (!a)
    return {};
  // Every value between acc and the alloca has one use: the next view.
  for (Operation *def = acc.getDefiningOp(); def != a.getOperation();) {
    Value source = def->getOperand(0);
    if (!source.hasOneUse())
      return {};
    def = source.getDefiningOp();
  }
  return a;
}

llvm::DenseMap<Value, int64_t> planDqRegisters(gpu::GPUFuncOp func) {
  llvm::DenseMap<Value, int64_t> plan;
  auto block = func.getKnownBlockSize();
  int64_t threads = block ? (*block)[0] : 256;
  int64_t budget = registerBudget(func, threads);
  if (budget < kDqRegisterBudget)
    return plan;
  func.walk([&](DqAccumulateOp dq) {
    Value acc = dq.getAcc();
    // The accumulator must be the alloca's only view.
    if (!soleRootAlloca(acc) || plan.count(acc))
      return;
    int64_t slots = dqRegisterSlots(dq, threads);
    if (8 * slots > budget - kDqOtherRegisters)
      slots = 0;
    bool zeroed = false;
    for (Operation *user : acc.getUsers()) {
      if (auto other = dyn_cast<DqAccumulateOp>(user)) {
        if (other.getAcc() != acc || dqRegisterSlots(other, threads) != slots)
          slots = 0;
      } else if (auto fill = dyn_cast<linalg::FillOp>(user)) {
        auto c = fill.getInputs()[0].getDefiningOp<arith::ConstantOp>();
        auto f = c ? dyn_cast<FloatAttr>(c.getValue()) : FloatAttr();
        if (!f || !f.getValue().isZero())
          slots = 0;
        zeroed = true;
      } else if (!isa<StoreDqOp>(user)) {
        slots = 0;
      }
    }
    // The private array starts undefined: it needs the zero fill.
    if (slots > 0 && zeroed)
      plan[acc] = slots;
  });
  return plan;
}

Value allocDqRegisters(OpBuilder &b, Location loc, int64_t slots) {
  Value n = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(slots * 8));
  return LLVM::AllocaOp::create(b, loc,
                                LLVM::LLVMPointerType::get(b.getContext()),
                                b.getF32Type(), n, /*alignment=*/16);
}

namespace {
/// Element `i` of the private accumulator array.
Value regPtr(OpBuilder &b, Location loc, Value regs, int64_t i) {
  return LLVM::GEPOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext()),
                             b.getF32Type(), regs,
                             ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)});
}
} // namespace

Value loadReg(OpBuilder &b, Location loc, Value regs, int64_t i) {
  return LLVM::LoadOp::create(b, loc, b.getF32Type(), regPtr(b, loc, regs, i));
}
void storeReg(OpBuilder &b, Location loc, Value regs, int64_t i, Value v) {
  LLVM::StoreOp::create(b, loc, v, regPtr(b, loc, regs, i));
}

namespace {

/// A warp's share of the register form: m tile warp % mTiles, column pairs
/// np = warp / mTiles + i * (warps / mTiles).
struct SlotLayout {
  Value mTile, first;
  int64_t stride;
};
SlotLayout slotLayout(Mma &m, Value warp, int64_t warps, int64_t hg) {
  int64_t mTiles = llvm::divideCeil(hg, 16);
  return {m.rem(warp, mTiles), m.div(warp, mTiles), warps / mTiles};
}

/// for slot i: if (np = first + i * stride < nPairs) body(i, np).
void forEachSlot(Mma &m, const SlotLayout &s, int64_t slots, int64_t nPairs,
                 function_ref<void(int64_t, Value)> body) {
  for (int64_t i = 0; i < slots; ++i) {
    Value np = m.add(s.first, i * s.stride);
    if ((i + 1) * s.stride <= nPairs) {
      body(i, np);
      continue;
    }
    scf::IfOp::create(
        m.b, m.loc, m.lt(np, nPairs), [&](OpBuilder &nb, Location l) {
          OpBuilder::InsertionGuard g(m.b);
          m.b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          body(i, np);
          scf::YieldOp::create(m.b, l);
        });
  }
}
} // namespace

void zeroDqRegisters(CtaEmitter &e, Value regs, int64_t slots) {
  Value z = arith::ConstantOp::create(e.b, e.loc, e.b.getF32FloatAttr(0));
  for (int64_t i = 0; i < slots * 8; ++i)
    storeReg(e.b, e.loc, regs, i, z);
}

void storeDqRegisters(CtaEmitter &e, StoreDqOp op, Value regs, int64_t slots,
                      NonFiniteFlag *flag) {
  Mma m{e.b, e.loc};
  auto accType = op.getAcc().getType();
  int64_t hg = accType.getDimSize(0), nPairs = accType.getDimSize(1) / 16;
  int64_t warps = e.threads / kMmaLanes;
  WarpLane w = m.warpLane(e.tid);
  SlotLayout s = slotLayout(m, w.warp, warps, hg);
  FragRows r = m.fragRows(s.mTile, w.gr, hg);
  Type elem = op.getDq().getType().getElementType();
  auto v2 = VectorType::get({2}, m.b.getF32Type());
  forEachSlot(m, s, slots, nPairs, [&](int64_t i, Value np) {
    for (int64_t t = 0; t < 2; ++t) {
      Value col = m.add(m.add(m.mul(np, 16), t * 8), w.kq);
      for (int64_t half = 0; half < 2; ++half) {
        Value ok = half ? r.ok1 : r.ok0, row = half ? r.r1 : r.r0;
        int64_t at = 8 * i + 4 * t + 2 * half;
        scf::IfOp::create(m.b, m.loc, ok, [&](OpBuilder &nb, Location l) {
          OpBuilder::InsertionGuard g(m.b);
          m.b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          Value v = vector::FromElementsOp::create(
              m.b, l, v2,
              ValueRange{loadReg(m.b, l, regs, at),
                         loadReg(m.b, l, regs, at + 1)});
          if (!elem.isF32())
            v = arith::TruncFOp::create(m.b, l, VectorType::get({2}, elem), v);
          Value head = headIndex(m.b, l, op.getHeadBlock(), hg, row);
          vector::StoreOp::create(m.b, l, v, op.getDq(),
                                  ValueRange{op.getToken(), head, col});
          if (flag)
            flag->add(m.b, l, v);
          scf::YieldOp::create(m.b, l);
        });
      }
    }
  });
}

/// dQ[h, c] += dS[h, :] . K[:, c]: M = heads, N = columns, K = slots. When
/// the warps divide evenly among the m tiles, each warp keeps one m tile
/// and loads its dS A fragments (rounded to bf16) once for the whole op,
/// then walks its share of the column pairs; otherwise (more m tiles than
/// warps) every (m tile, column pair) item reloads them.
void lowerDqAccumulateMma(CtaEmitter &e, DqAccumulateOp op, Value regs,
                          int64_t slots) {
  Mma m{e.b, e.loc};
  auto accType = op.getAcc().getType();
  int64_t hg = accType.getDimSize(0), width = accType.getDimSize(1);
  int64_t block = op.getDs().getType().getDimSize(1);
  int64_t tileW = staticDim(op.getTile(), 1); // row stride, >= width
  int64_t mTiles = llvm::divideCeil(hg, 16), nPairs = width / 16;
  int64_t warps = e.threads / kMmaLanes;
  bool keepA = warps % mTiles == 0;

  WarpLane w = m.warpLane(e.tid);
  Value warp = w.warp, lane = w.lane, gr = w.gr, kq = w.kq;
  Value tileBase = m.base(op.getTile());
  // ldmatrix.x4.trans: lane l gives the row address of matrix l / 8:
  // tile row k + l % 16, column n0 + 8 * (l / 16).
  Value ldRow = m.rem(lane, 16), ldCol = m.mul(m.div(lane, 16), 8);
  Value acc = op.getAcc(), ds = op.getDs();
  Value zi = m.zeroI32();

  // Rows >= Hg read row 0 and are replaced by zero, and are never stored.
  auto rowsOfTile = [&](Value mt) { return m.fragRows(mt, gr, hg); };
  // A fragment of the k step at slot k: dS rows (r0, r1) x slots (k + kq,
  // k + kq + 8), rounded to bf16.
  auto aFrag = [&](const FragRows &r, Value k) -> SmallVector<Value> {
    Value kc = m.add(k, kq), kc8 = m.add(kc, 8);
    return {m.sel(r.ok0, m.packBf16(m.loadF32x2(ds, r.s0, kc)), zi),
            m.sel(r.ok1, m.packBf16(m.loadF32x2(ds, r.s1, kc)), zi),
            m.sel(r.ok0, m.packBf16(m.loadF32x2(ds, r.s0, kc8)), zi),
            m.sel(r.ok1, m.packBf16(m.loadF32x2(ds, r.s1, kc8)), zi)};
  };
  // C += A . B for the two n8 tiles at columns n0 and n0 + 8, k step k.
  auto step = [&](Value n0, Value k, ArrayRef<Value> a,
                  ValueRange c) -> SmallVector<Value> {
    Value bRow =
        m.add(tileBase, m.mul(m.add(m.mul(ldRow, tileW), m.add(n0, ldCol)), 2));
    Value addr = m.add(bRow, m.mul(k, tileW * 2));
    SmallVector<Value> bq = m.ldmatrix(addr, 4, /*trans=*/true);
    SmallVector<Value> d0 = m.mma(a, {bq[0], bq[1]}, c.take_front(4));
    SmallVector<Value> d1 = m.mma(a, {bq[2], bq[3]}, c.drop_front(4));
    d0.append(d1);
    return d0;
  };
  // Loads the C fragments of the pair at n0, runs `body`, stores them.
  auto pair = [&](const FragRows &r, Value n0,
                  function_ref<SmallVector<Value>(ValueRange)> body) {
    Value z = m.zeroF32();
    SmallVector<Value> init, cols;
    for (int64_t t = 0; t < 2; ++t) {
      Value col = m.add(m.add(n0, t * 8), kq);
      cols.push_back(col);
      Value x0 = m.loadF32x2(acc, r.s0, col), x1 = m.loadF32x2(acc, r.s1, col);
      for (auto [ok, x] : {std::pair{r.ok0, x0}, std::pair{r.ok1, x1}})
        for (int64_t i = 0; i < 2; ++i)
          init.push_back(
              m.sel(ok, vector::ExtractOp::create(m.b, m.loc, x, i), z));
    }
    SmallVector<Value> out = body(init);
    for (int64_t t = 0; t < 2; ++t) {
      m.storePairIf(r.ok0, acc, r.r0, cols[t], out[4 * t], out[4 * t + 1]);
      m.storePairIf(r.ok1, acc, r.r1, cols[t], out[4 * t + 2], out[4 * t + 3]);
    }
  };

  if (regs) {
    // The register form: the warps divide evenly among the m tiles
    // (dqRegisterSlots), C in the private array at constant indices.
    SlotLayout s = slotLayout(m, warp, warps, hg);
    FragRows r = rowsOfTile(s.mTile);
    SmallVector<SmallVector<Value>> a;
    for (int64_t k = 0; k < block; k += 16)
      a.push_back(aFrag(r, m.c(k)));
    forEachSlot(m, s, slots, nPairs, [&](int64_t i, Value np) {
      Value n0 = m.mul(np, 16);
      SmallVector<Value> c;
      for (int64_t j = 0; j < 8; ++j)
        c.push_back(loadReg(m.b, m.loc, regs, 8 * i + j));
      for (int64_t k = 0; k < block; k += 16)
        c = step(n0, m.c(k), a[k / 16], c);
      for (int64_t j = 0; j < 8; ++j)
        storeReg(m.b, m.loc, regs, 8 * i + j, c[j]);
    });
    return;
  }
  if (keepA) {
    FragRows r = rowsOfTile(m.rem(warp, mTiles));
    SmallVector<SmallVector<Value>> a;
    for (int64_t k = 0; k < block; k += 16)
      a.push_back(aFrag(r, m.c(k)));
    int64_t stride = warps / mTiles;
    scf::ForOp::create(
        m.b, m.loc, m.div(warp, mTiles), m.c(nPairs), m.c(stride), ValueRange{},
        [&](OpBuilder &nb, Location l, Value np, ValueRange) {
          OpBuilder::InsertionGuard g(m.b);
          m.b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          Value n0 = m.mul(np, 16);
          pair(r, n0, [&](ValueRange init) {
            SmallVector<Value> c(init);
            for (int64_t k = 0; k < block; k += 16)
              c = step(n0, m.c(k), a[k / 16], c);
            return c;
          });
          scf::YieldOp::create(m.b, l);
        });
    return;
  }
  m.warpLoop(warp, warps, mTiles * nPairs, [&](Value p) {
    FragRows r = rowsOfTile(m.div(p, nPairs));
    Value n0 = m.mul(m.rem(p, nPairs), 16);
    pair(r, n0, [&](ValueRange init) {
      return m.reduce(block, 16, init,
                      [&](Value k, ValueRange c) -> SmallVector<Value> {
                        return step(n0, k, aFrag(r, k), c);
                      });
    });
  });
}

} // namespace mlir::smla
