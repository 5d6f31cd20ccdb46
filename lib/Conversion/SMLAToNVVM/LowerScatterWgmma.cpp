//===- LowerScatterWgmma.cpp - the dKV scatter on wgmma -------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//   scatter_dkv    dkv[idx[j], c] += sum_h bf16(ds[h, j]) * q[h, c]
//                                  + sum_h bf16(p[h, j]) * do[h, c]
//
// The form for a 32-row CTA at block 64 on 512 threads whose q and do rows
// are staged as one canonical [q; do] tile (StageTokenRows.cpp), split by
// smla-defer-scatter into pack_dkv and scatter_packed chunks:
//   pack_dkv        every thread packs its share of dS^T and P^T to bf16
//                   into K-major canonical [64 slots][32 rows] tiles (the
//                   two halves of `packed`), threads < 64 write slot j's
//                   index or -1, then all fence the async proxy.
//   scatter_packed  chunk c: warpgroup w runs the 48 columns 48 (4 c + w):
//                   four m64n48k16 wgmma (dS^T q over two k steps, then
//                   P^T do), A from `packed`, B the [q; do] tile read
//                   MN-major (trans-b); the do rows are zero past D, so
//                   every warpgroup runs the same instructions. Each
//                   thread's accumulators hold, per n8 tile, 2 consecutive
//                   columns of slots 16 (warp % 4) + lane / 4 and 8 more;
//                   a shfl.xor exchange per pair of n8 tiles turns them
//                   into red.global.add.v4.f32 of which a quad covers 64
//                   bytes of one slot, predicated by slot >= 0. A
//                   chunk alongside a fused run (kOverlapRunAttr) runs in
//                   warpgroups 1-3 as three m64n64k16 pieces (the
//                   cluster form: three m64n32k16 of its 96 columns);
//                   the one right before the run (the mark's value 1;
//                   with overlap-chunks=2 another precedes it) arrives
//                   at named barrier 1 once its wgmma have read the
//                   packed tiles and it holds its slots.
// Descriptors (bench/wgmma.cu, bench/wgmma_dkv.cu check both readings):
// K-major A: LBO = 1024 (k), SBO = 128 (slots); MN-major B: LBO = 128
// (rows), SBO = 1024 (columns); the swapped readings give wrong sums. One
// block's dKV products are 5.5x faster than the mma.sync form's
// (bench/wgmma_dkv.cu).
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/Wgmma.h"

using namespace mlir;
using namespace mlir::smla;
using namespace mlir::smla::mma;
using namespace mlir::smla::wgmma;

namespace mlir::smla {

namespace {
constexpr int64_t kSlots = 64, kChunk = 48,
                  kClusterChunk = kWgmmaChunkColumns / 2;
} // namespace

namespace {
/// The marked chunk right before the run (its mark's value 1, not a chunk
/// before another marked one): the one that arrives at named barrier 1.
bool lastOverlapChunk(ScatterPackedOp op) {
  auto place = op->getAttrOfType<IntegerAttr>(kOverlapRunAttr);
  return place && place.getInt() == 1;
}
Value toI32(OpBuilder &b, Location loc, Value v) {
  return arith::IndexCastOp::create(b, loc, b.getI32Type(), v);
}
/// This CTA's rank in its cluster (%cluster_ctarank).
Value clusterRank(OpBuilder &b, Location loc) {
  return inlineAsm(b, loc, b.getI32Type(), ValueRange{},
                   "mov.u32 $0, %cluster_ctarank;", "=r")
      .getResult(0);
}
} // namespace

bool canUseWgmma(ScatterDkvOp op, int64_t threads) {
  auto ds = op.getDs().getType();
  int64_t width = staticDim(op.getQ(), 2);
  return canonicalRow(op.getQ()) == 0 &&
         canonicalRow(op.getDout()) == kCanonicalHalf && threads == 512 &&
         ds.getDimSize(0) == kCanonicalHalf && ds.getDimSize(1) == kSlots &&
         width % kWgmmaChunkColumns == 0 &&
         op.getDkv().getType().getDimSize(2) == width;
}

/// pack_dkv's `cluster` form: each 32-bit pair this thread packed also goes
/// to the same byte of the partner CTA's partner[count % 2] (st.async,
/// 4 bytes of the partner's bars[count % 2] transaction); thread 0 arms
/// its own bars[count % 2] with the 8 KB the partner sends for the same
/// block. No release: the partner reads the tiles after its mbarrier
/// phase completes.
Value packCount(CtaEmitter &e, PackDkvOp op) {
  return memref::LoadOp::create(e.b, e.loc, op.getCluster()[2], ValueRange{});
}

void advancePackCount(CtaEmitter &e, PackDkvOp op, Value count) {
  memref::StoreOp::create(
      e.b, e.loc, arith::AddIOp::create(e.b, e.loc, count, i32c(e.b, e.loc, 1)),
      op.getCluster()[2], ValueRange{});
}

PartnerTiles partnerTiles(CtaEmitter &e, PackDkvOp op, Value count) {
  Mma m{e.b, e.loc};
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Value buffer = arith::IndexCastOp::create(
      b, loc, b.getIndexType(),
      arith::AndIOp::create(b, loc, count, i32c(b, loc, 1)));
  PartnerTiles t;
  t.rank = arith::XOrIOp::create(b, loc, clusterRank(b, loc), i32c(b, loc, 1));
  t.base = m.add(m.base(op.getCluster()[0]), m.mul(buffer, kPartnerTileBytes));
  t.bar = toI32(b, loc, m.add(m.base(op.getCluster()[1]), m.mul(buffer, 8)));
  return t;
}

void sendToPartner(CtaEmitter &e, const PartnerTiles &t, Value offset,
                   Value pair) {
  Mma m{e.b, e.loc};
  inlineAsm(e.b, e.loc, Type(),
            ValueRange{toI32(e.b, e.loc, m.add(t.base, offset)), t.rank, t.bar,
                       pair},
            "{\n.reg .u32 a, m;\nmapa.shared::cluster.u32 a, $0, $1;\n"
            "mapa.shared::cluster.u32 m, $2, $1;\n"
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 "
            "[a], $3, [m];\n}",
            "r,r,r,r");
}

void armPartnerTiles(CtaEmitter &e, const PartnerTiles &t) {
  inlineAsm(e.b, e.loc, Type(), ValueRange{t.bar, toI32(e.b, e.loc, e.tid)},
            "{\n.reg .pred p;\nsetp.eq.u32 p, $1, 0;\n"
            "@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], " +
                std::to_string(kPartnerTileBytes) + ";\n}",
            "r,r");
}

Value packedPairOffset(OpBuilder &b, Location loc, Value h, Value jBlock,
                       Value jLow) {
  Mma m{b, loc};
  return m.add(m.add(m.mul(m.div(h, 8), 1024), m.mul(jBlock, 128)),
               m.add(m.mul(jLow, 16), m.mul(m.rem(h, 8), 2)));
}

void writePackSlots(CtaEmitter &e, PackDkvOp op, const LaneFn &mask,
                    const LaneFn &index, int64_t firstThread) {
  Mma m{e.b, e.loc};
  // Slot j: its index where the mask holds, else -1 (never an address).
  // Threads below firstThread wrap around to large j and write nothing.
  Value j = firstThread ? arith::SubIOp::create(e.b, e.loc, e.tid,
                                                m.c(firstThread))
                              .getResult()
                        : e.tid;
  scf::IfOp::create(e.b, e.loc, m.lt(j, kSlots),
                    [&](OpBuilder &tb, Location l) {
                      Value none = arith::ConstantOp::create(
                          tb, l, tb.getI32IntegerAttr(-1));
                      Value slot = arith::SelectOp::create(
                          tb, l, mask(tb, l, j), index(tb, l, j), none);
                      memref::StoreOp::create(tb, l, slot, op.getSlots(),
                                              ValueRange{j});
                      scf::YieldOp::create(tb, l);
                    });
}

void lowerClusterInit(CtaEmitter &e, ClusterInitOp op) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  Type i32 = b.getI32Type();
  Value bars = arith::IndexCastOp::create(
      b, loc, i32,
      memref::ExtractAlignedPointerAsIndexOp::create(b, loc, op.getBars()));
  Value tid = arith::IndexCastOp::create(b, loc, i32, e.tid);
  int64_t count = op.getBars().getType().getDimSize(0);
  inlineAsm(b, loc, Type(), ValueRange{bars, tid},
            "{\n.reg .pred p;\n.reg .u32 a;\nsetp.lt.u32 p, $1, " +
                std::to_string(count) +
                ";\n"
                "mad.lo.u32 a, $1, 8, $0;\n"
                "@p mbarrier.init.shared::cta.b64 [a], 1;\n}\n"
                "fence.mbarrier_init.release.cluster;\n"
                "barrier.cluster.arrive.release.aligned;\n"
                "barrier.cluster.wait.acquire.aligned;",
            "r,r");
}

void lowerPackDkv(CtaEmitter &e, PackDkvOp op, const LaneFn &mask,
                  const LaneFn &index) {
  Mma m{e.b, e.loc};
  OpBuilder &b = e.b;
  Location loc = e.loc;
  // dS^T and P^T to bf16, canonical K-major [64 slots][32 rows]: pair
  // (j, h .. h + 1) at (h / 8) 1024 + (j / 8) 128 + 16 (j % 8) + 2 (h % 8).
  // Thread e of 1024 pairs per tile: j % 8 = e % 8, h / 2 = (e / 8) % 16,
  // j / 8 = e / 128 (a warp's stores fill 32 distinct banks).
  Value dsBase = m.base(op.getPacked());
  Value pBase = m.add(dsBase, kPackedTileBytes);
  SmallVector<std::pair<Value, Value>> sent; // (byte offset, packed pair)
  for (int64_t i = 0; i < kSlots * kCanonicalHalf / 2 / e.threads; ++i) {
    Value at = m.add(e.tid, i * e.threads);
    Value j8 = m.rem(at, 8), jb = m.div(at, 128);
    Value h = m.mul(m.rem(m.div(at, 8), 16), 2);
    Value j = m.add(m.mul(jb, 8), j8);
    auto pack = [&](Value tile) {
      Value x0 = memref::LoadOp::create(b, loc, tile, ValueRange{h, j});
      Value x1 =
          memref::LoadOp::create(b, loc, tile, ValueRange{m.add(h, 1), j});
      return m.packBf16(vector::FromElementsOp::create(
          b, loc, VectorType::get({2}, b.getF32Type()), ValueRange{x0, x1}));
    };
    Value offset = packedPairOffset(b, loc, h, jb, j8);
    Value ds = pack(op.getDs());
    LLVM::StoreOp::create(b, loc, ds, m.ptr(m.add(dsBase, offset), 3),
                          /*alignment=*/4);
    Value p = pack(op.getProbs());
    LLVM::StoreOp::create(b, loc, p, m.ptr(m.add(pBase, offset), 3),
                          /*alignment=*/4);
    if (!op.getCluster().empty()) {
      sent.push_back({offset, ds});
      sent.push_back({m.add(offset, kPackedTileBytes), p});
    }
  }
  if (!op.getCluster().empty()) {
    Value count = packCount(e, op);
    advancePackCount(e, op, count);
    PartnerTiles tiles = partnerTiles(e, op, count);
    for (auto [offset, value] : sent)
      sendToPartner(e, tiles, offset, value);
    armPartnerTiles(e, tiles);
  }
  writePackSlots(e, op, mask, index, 0);
  emitProxyFence(b, loc);
}

namespace {
/// A chunk's reductions from its wgmma accumulators: per n8 tile i,
/// d[4 i + {0, 1}] are columns 8 i + kq + {0, 1} of slot j0 = 16 (warp % 4)
/// + lane / 4, d[4 i + {2, 3}] those of slot j1 = j0 + 8. For each pair of
/// n8 tiles (A, B), lanes 2k and 2k + 1 (kq and kq + 2) swap two pairs
/// (shfl.xor 1) so that each holds 4 consecutive columns of slot j0 (the
/// even lane in A, the odd in B) and of slot j1 (the even lane in B, the
/// odd in A): a quad's red.global.add.v4.f32 then covers 16 consecutive
/// columns (64 bytes) of one slot, as in the mma.sync scatter. Covering
/// 32 bytes of twice the rows per instruction (red.v2, or red.v4 over one
/// n8 tile) measured 0.87x on B1 (`bench/bench_bwd.py --shapes B1`),
/// whose rows many CTAs reduce into at once. Slots of -1 add nothing and are never an address.
struct ChunkReductions {
  Mma &m;
  ScatterPackedOp op;
  Value raw0, raw1, valid0, valid1, odd, four, one, lanes;

  /// The thread's slots (read after the wgmma, not live across it) and
  /// the lane roles of the pairing.
  ChunkReductions(Mma &m, ScatterPackedOp op, const WarpLane &w, Value w4)
      : m(m), op(op) {
    OpBuilder &b = m.b;
    Location loc = m.loc;
    Value j0 = m.add(m.mul(w4, 16), w.gr), j1 = m.add(j0, 8);
    Value zero = i32c(b, loc, 0);
    raw0 = memref::LoadOp::create(b, loc, op.getSlots(), ValueRange{j0});
    raw1 = memref::LoadOp::create(b, loc, op.getSlots(), ValueRange{j1});
    valid0 = valid(raw0, zero);
    valid1 = valid(raw1, zero);
    Value parity = m.rem(w.lane, 2);
    odd = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, parity,
                                m.c(0));
    four = arith::SubIOp::create(b, loc, w.kq, m.mul(parity, 2));
    one = i32c(b, loc, 1);
    lanes = i32c(b, loc, 32);
  }
  Value valid(Value raw, Value zero) {
    return arith::CmpIOp::create(m.b, m.loc, arith::CmpIPredicate::sge, raw,
                                 zero);
  }
  Value pick(Value ifOdd, Value ifEven) {
    return arith::SelectOp::create(m.b, m.loc, odd, ifOdd, ifEven);
  }
  Value swap(Value ifOdd, Value ifEven) {
    return gpu::ShuffleOp::create(m.b, m.loc, pick(ifOdd, ifEven), one, lanes,
                                  gpu::ShuffleMode::XOR)
        .getShuffleResult();
  }
  /// The pair of n8 tiles a = d[4 i ..], bt = d[4 i + 4 ..]: two red.v4;
  /// `columns(four)` gives the dkv columns of A and B for this lane.
  void pair(ValueRange a, ValueRange bt,
            llvm::function_ref<std::pair<Value, Value>(Value)> columns) {
    OpBuilder &b = m.b;
    Location loc = m.loc;
    Value r0 = swap(a[0], bt[0]), r1 = swap(a[1], bt[1]);
    Value r2 = swap(bt[2], a[2]), r3 = swap(bt[3], a[3]);
    auto [colA, colB] = columns(four);
    emitMaskedRed(b, loc, op.getDkv(), op.getGroup(), valid0, raw0,
                  pick(colB, colA),
                  ValueRange{pick(r0, a[0]), pick(r1, a[1]), pick(bt[0], r0),
                             pick(bt[1], r1)});
    emitMaskedRed(b, loc, op.getDkv(), op.getGroup(), valid1, raw1,
                  pick(colA, colB),
                  ValueRange{pick(r2, bt[2]), pick(r3, bt[3]), pick(a[2], r2),
                             pick(a[3], r3)});
  }
};
} // namespace

namespace {
/// scatter_packed's `cluster` form: rank r's chunk c covers the 96
/// columns r W / 2 + 96 c .. of every slot, 24 per warpgroup
/// (m64n24k16; alongside a fused run, 32 per warpgroup 1-3, m64n32k16,
/// reduced as two pairs of n8 tiles), over 8 k steps: dS^T q and P^T do of its own rows (the
/// [q; do] tile, `packed`) and of the partner's (`rows`, the partner
/// tiles of block count - 1, which chunk 0 first waits for). Per thread
/// 12 sums: n8 tiles 0 and 1 as one red.v4 per slot after the shfl.xor 1
/// pairing, tile 2 as one red.v2 per slot.
void lowerScatterPackedCluster(CtaEmitter &e, ScatterPackedOp op,
                               bool overlap) {
  Mma m{e.b, e.loc};
  OpBuilder &b = e.b;
  Location loc = e.loc;
  // Alongside the fused run: warpgroups 1-3, 32 columns each.
  const int64_t kN = overlap ? 32 : 24;
  WarpLane w = m.warpLane(e.tid);
  Value kq = w.kq;
  Value wg = m.div(e.tid, 128), w4 = m.rem(w.warp, 4);
  if (overlap)
    wg = arith::SubIOp::create(b, loc, wg, m.c(1)).getResult();
  Value rows = op.getCluster()[0], partnerTiles = op.getCluster()[1],
        bars = op.getCluster()[2], countRef = op.getCluster()[3];
  int64_t width = staticDim(op.getQ(), 2), half = width / 2;
  int64_t tileBytes = kPartnerTileBytes;
  Value count = memref::LoadOp::create(b, loc, countRef, ValueRange{});
  // Block count - 1's partner tiles: buffer (count - 1) % 2.
  Value prev = arith::SubIOp::create(b, loc, count, i32c(b, loc, 1));
  Value bufI32 = arith::AndIOp::create(b, loc, prev, i32c(b, loc, 1));
  Value buffer =
      arith::IndexCastOp::create(b, loc, b.getIndexType(), bufI32);
  if (op.getChunk() == 0) {
    Value phase = arith::AndIOp::create(
        b, loc, arith::ShRUIOp::create(b, loc, prev, i32c(b, loc, 1)),
        i32c(b, loc, 1));
    Value bar = toI32(b, loc, m.add(m.base(bars), m.mul(buffer, 8)));
    inlineAsm(b, loc, Type(), ValueRange{bar, phase, count},
              "{\n.reg .pred p, q;\nsetp.eq.u32 q, $2, 0;\n@q bra done;\n"
              "wait:\nmbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;"
              "\n@!p bra wait;\ndone:\n}",
              "r,r,r");
    emitProxyFence(b, loc);
  }
  Value rank = arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                          clusterRank(b, loc));
  // Column (of the CTA's half) of this warpgroup's piece, laundered so
  // that the chunks' addresses stay out of the loop (see below).
  Value piece =
      launder(m, m.add(m.mul(wg, kN), op.getChunk() * kClusterChunk));
  Value ownCols = m.add(m.mul(rank, half), piece);
  Value ownB = descriptor(
      m, m.add(m.base(op.getQ()), m.mul(m.div(ownCols, 8), kCanonicalStride)),
      128, kCanonicalStride);
  Value partnerB = descriptor(
      m, m.add(m.base(rows), m.mul(m.div(piece, 8), kCanonicalStride)), 128,
      kCanonicalStride);
  Value ownA = descriptor(m, launder(m, m.base(op.getPacked())), 1024, 128);
  Value partnerA = descriptor(
      m, m.add(m.base(partnerTiles), m.mul(buffer, tileBytes)), 1024, 128);
  SmallVector<Value> d;
  fence(b, loc);
  for (auto [descA, descB] : {std::pair{ownA, ownB}, {partnerA, partnerB}})
    for (int64_t product = 0; product < 2; ++product)
      for (int64_t s = 0; s < 2; ++s)
        d = mmaAsync(m, kN, ValueRange{},
                     advance(m, descA,
                             product * kPackedTileBytes + s * 2048),
                     advance(m, descB, (product * 4 + 2 * s) * 128),
                     /*transB=*/true, d);
  commit(b, loc);
  wait(b, loc, 0);
  ChunkReductions red(m, op, w, w4);
  if (overlap) {
    // The packed tiles read and the slots loaded: warpgroup 0 may
    // overwrite them. n8 tiles 0-1 and 2-3 as pairs.
    if (lastOverlapChunk(op))
      arriveOverlap(b, loc);
    for (int64_t i = 0; i < kN / 8; i += 2)
      red.pair(ValueRange(ArrayRef<Value>(d).slice(4 * i, 4)),
               ValueRange(ArrayRef<Value>(d).slice(4 * i + 4, 4)),
               [&](Value four) {
                 Value base = m.add(ownCols, four);
                 return std::pair{m.add(base, 8 * i),
                                  m.add(base, 8 * (i + 1))};
               });
    return;
  }
  // n8 tiles 0 and 1 as one pair, then tile 2 as red.v2 per slot.
  red.pair(ValueRange(ArrayRef<Value>(d).slice(0, 4)),
           ValueRange(ArrayRef<Value>(d).slice(4, 4)), [&](Value four) {
             Value base = m.add(ownCols, four);
             return std::pair{base, m.add(base, 8)};
           });
  Value col2 = m.add(ownCols, m.add(kq, 16));
  emitMaskedRed(b, loc, op.getDkv(), op.getGroup(), red.valid0, red.raw0,
                col2, ValueRange{d[8], d[9]});
  emitMaskedRed(b, loc, op.getDkv(), op.getGroup(), red.valid1, red.raw1,
                col2, ValueRange{d[10], d[11]});
}
/// The token-pair / 32-head form: warpgroup w runs 48 columns of the
/// chunk; alongside the fused run (overlap) warpgroup w = 1..3 runs 64.
void lowerScatterPackedPair(CtaEmitter &e, ScatterPackedOp op, bool overlap) {
  Mma m{e.b, e.loc};
  OpBuilder &b = e.b;
  Location loc = e.loc;
  WarpLane w = m.warpLane(e.tid);
  Value wg = m.div(e.tid, 128), w4 = m.rem(w.warp, 4);
  Value dsBase = m.base(op.getPacked());
  Value qdo = m.base(op.getQ());

  int64_t chunkWidth = staticDim(op.getQ(), 2) / op.getChunks();
  if (chunkWidth != kWgmmaChunkColumns)
    llvm::report_fatal_error("smla: scatter_packed needs chunks of 192 "
                             "columns (4 warpgroups x 48)");
  // The chunk's addresses are loop-invariant: hoisted out of the block
  // loop, the three chunks' descriptors and column offsets stayed live
  // across it and the kernel spilled (204 bytes at 128 registers). They
  // are computed here from an opaque copy of the column block and of the
  // packed tile's address, and each wgmma's descriptors from one base
  // each (the start address field is address / 16: + offset / 16).
  // Piece n of the row's 48-column pieces (64 alongside the run, where
  // warpgroups 1-3 take the chunk's three).
  const int64_t width = overlap ? kWgmmaChunkColumns / 3 : kChunk;
  const int64_t parts = kWgmmaChunkColumns / width;
  Value part = overlap ? arith::SubIOp::create(b, loc, wg, m.c(1)).getResult()
                       : wg;
  Value n = launder(m, m.add(part, op.getChunk() * parts));
  Value columns = m.add(qdo, m.mul(n, width / 8 * kCanonicalStride));
  Value descA = descriptor(m, launder(m, dsBase), 1024, 128);
  Value descB = descriptor(m, columns, 128, kCanonicalStride);
  SmallVector<Value> d;
  fence(b, loc);
  for (int64_t product = 0; product < 2; ++product)
    for (int64_t s = 0; s < 2; ++s)
      d = mmaAsync(
          m, width, ValueRange{},
          advance(m, descA, product * kPackedTileBytes + s * 2048),
          advance(m, descB, (product * 4 + 2 * s) * 128), /*transB=*/true, d);
  commit(b, loc);
  wait(b, loc, 0);
  ChunkReductions red(m, op, w, w4);
  // The packed tiles read and the slots loaded: warpgroup 0 may
  // overwrite them.
  if (overlap && lastOverlapChunk(op))
    arriveOverlap(b, loc);
  for (int64_t i = 0; i < width / 8; i += 2)
    red.pair(ValueRange(ArrayRef<Value>(d).slice(4 * i, 4)),
             ValueRange(ArrayRef<Value>(d).slice(4 * i + 4, 4)),
             [&](Value four) {
               Value base = m.add(m.mul(n, width), four);
               return std::pair{m.add(base, 8 * i), m.add(base, 8 * (i + 1))};
             });
}

} // namespace

void lowerScatterPacked(CtaEmitter &e, ScatterPackedOp op) {
  bool overlap = op->hasAttr(kOverlapRunAttr);
  auto body = [&](CtaEmitter &e) {
    if (!op.getCluster().empty())
      return lowerScatterPackedCluster(e, op, overlap);
    lowerScatterPackedPair(e, op, overlap);
  };
  if (!overlap)
    return body(e);
  // Alongside the fused run (kOverlapRunAttr): warpgroups 1-3 only.
  Mma m{e.b, e.loc};
  Value notFirst = arith::CmpIOp::create(
      e.b, e.loc, arith::CmpIPredicate::uge, e.tid, m.c(128));
  scf::IfOp::create(e.b, e.loc, notFirst,
                    [&](OpBuilder &nb, Location l) {
                      OpBuilder::InsertionGuard guard(e.b);
                      e.b.setInsertionPoint(nb.getInsertionBlock(),
                                            nb.getInsertionPoint());
                      body(e);
                      scf::YieldOp::create(e.b, l);
                    });
}

void arriveOverlap(OpBuilder &b, Location loc) {
  statement(b, loc,
            "bar.arrive " + std::to_string(kOverlapBarrier) + ", 512;");
}

void syncOverlap(OpBuilder &b, Location loc) {
  statement(b, loc, "bar.sync " + std::to_string(kOverlapBarrier) + ", 512;");
}

} // namespace mlir::smla
