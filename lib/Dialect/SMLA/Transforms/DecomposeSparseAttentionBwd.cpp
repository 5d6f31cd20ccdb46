//===- DecomposeSparseAttentionBwd.cpp - whole op -> tile loop nest -------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Dialect/SMLA/Transforms/GuardAnalysis.h"
#include "smla/Dialect/SMLA/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::smla {
#define GEN_PASS_DEF_SMLADECOMPOSE
#include "smla/Dialect/SMLA/Transforms/Passes.h.inc"
} // namespace mlir::smla

using namespace mlir;
using namespace mlir::smla;

namespace {
/// Scratch tiles of one (token, head block) step, allocated once per call;
/// Hb = H / G / headBlocks heads.
struct Scratch {
  Value keys;   // [B, W]  gathered K/V rows (bf16)
  Value scores; // [Hb, B] q.k
  Value probs;  // [Hb, B] P
  Value dp;     // [Hb, B] do.v
  Value ds;     // [Hb, B] dS
  Value dqAcc;  // [Hb, W] dQ accumulator
  Value delta;  // [Hb]    rowsum(o*do)
};

Scratch allocateScratch(OpBuilder &b, Location loc, ConfigAttr cfg) {
  int64_t hg = cfg.getHeadsPerBlock(), blk = cfg.getBlock();
  int64_t w = cfg.getQkWidth();
  Type f32 = b.getF32Type();
  auto scratch = [&](ArrayRef<int64_t> shape, Type elem) -> Value {
    return memref::AllocaOp::create(b, loc, MemRefType::get(shape, elem));
  };
  Scratch s;
  // kv is bf16, so its gathered rows are kept in bf16 exactly.
  s.keys = scratch({blk, w}, b.getBF16Type());
  s.scores = scratch({hg, blk}, f32);
  s.probs = scratch({hg, blk}, f32);
  s.dp = scratch({hg, blk}, f32);
  s.ds = scratch({hg, blk}, f32);
  s.dqAcc = scratch({hg, w}, f32);
  s.delta = scratch({hg}, f32);
  return s;
}

/// With heads split into several blocks per group, every block loads the
/// group's indices but only the first may count its invalid slots: a mask
/// used for nothing but counting, whose lane count is 0 in the other blocks.
void emitSplitSlotCount(OpBuilder &b, Location loc, SparseAttentionBwdOp op,
                        IndexLoadOp load, Value headBlock, Value limit) {
  ConfigAttr cfg = op.getConfig();
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  Value bound = memref::DimOp::create(b, loc, op.getKv(), index(0));
  Value lanes = buildTailLaneCount(b, loc, load);
  Value first = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq,
      arith::RemUIOp::create(b, loc, headBlock, index(cfg.getHeadBlocks())),
      index(0));
  lanes = arith::SelectOp::create(b, loc, first, lanes, index(0));
  auto maskType = VectorType::get({cfg.getBlock()}, b.getI1Type());
  IndexMaskOp::create(b, loc, maskType, load.getResult(), bound, lanes,
                      limit, op.getCounters());
}

/// A step of two tokens (config tokens = 2): both tokens' index blocks at
/// `offset`, each masked against kv (and counting its invalid slots), and
/// the block of slots they share. The scatter's masks against dKV are
/// left to smla-insert-index-masks, like a one-token step's.
Value emitIndexPair(OpBuilder &b, Location loc, SparseAttentionBwdOp op,
                    ArrayRef<Value> tokens, ArrayRef<Value> limits,
                    Value group, Value offset) {
  ConfigAttr cfg = op.getConfig();
  auto idxType = VectorType::get({cfg.getBlock()}, b.getI32Type());
  auto maskType = VectorType::get({cfg.getBlock()}, b.getI1Type());
  SmallVector<Value, 4> parts;
  for (auto [token, limit] : llvm::zip_equal(tokens, limits)) {
    auto load = IndexLoadOp::create(b, loc, idxType, op.getIndices(), token,
                                    group, offset, limit, /*length=*/Value(),
                                    op.getCounters());
    Value bound = memref::DimOp::create(b, loc, op.getKv(), 0);
    Value lanes = buildTailLaneCount(b, loc, load);
    parts.push_back(load.getResult());
    parts.push_back(IndexMaskOp::create(b, loc, maskType, load.getResult(),
                                        bound, lanes, limit,
                                        op.getCounters())
                        .getMask());
  }
  return IndexPairOp::create(b, loc, parts[0], parts[1], parts[2], parts[3])
      .getIndices();
}

/// The body for one top-k block: gather, products, softmax, dS, dQ, dKV.
/// `group` is the kv group, `headBlock` the block of Hb heads it serves;
/// `indexTokens` / `limits` the token(s) whose index rows it walks (two
/// for a folded pair of tokens, else `token` itself); `length` the token's
/// slot count when the op has topk_length.
void emitBlock(OpBuilder &b, Location loc, SparseAttentionBwdOp op,
               const Scratch &s, Value token, Value group, Value headBlock,
               Value offset, ArrayRef<Value> indexTokens,
               ArrayRef<Value> limits, Value length) {
  ConfigAttr cfg = op.getConfig();
  bool split = cfg.getHeadBlocks() > 1;
  Value idx;
  if (indexTokens.size() == 2) {
    idx = emitIndexPair(b, loc, op, indexTokens, limits, group, offset);
  } else {
    Value limit = limits.front();
    auto idxType = VectorType::get({cfg.getBlock()}, b.getI32Type());
    auto load = IndexLoadOp::create(b, loc, idxType, op.getIndices(), token,
                                    group, offset, limit, length,
                                    split ? Value() : op.getCounters());
    idx = load.getResult();
    if (split && op.getCounters())
      emitSplitSlotCount(b, loc, op, load, headBlock, limit);
  }
  GatherOp::create(b, loc, op.getKv(), group, idx, /*mask=*/Value(), s.keys);
  // Both block products first: they only read the gathered tile, so the
  // GPU runs them without a barrier between them.
  TileDotOp::create(b, loc, op.getQ(), token, headBlock, s.keys, s.scores);
  TileDotOp::create(b, loc, op.getDout(), token, headBlock, s.keys, s.dp);
  auto base = LseBaseAttr::get(b.getContext(), cfg.getLseBase());
  SoftmaxOp::create(b, loc, s.scores, op.getLse(), token, headBlock,
                    /*mask=*/Value(), /*pair_mask=*/Value(),
                    /*live=*/Value(), op.getCounters(),
                    s.probs, op.getSmScaleAttr(), base, /*clamp=*/nullptr);
  DScoresOp::create(b, loc, s.probs, s.dp, s.delta, s.ds, op.getSmScaleAttr());
  DqAccumulateOp::create(b, loc, s.ds, s.keys, s.dqAcc);
  ScatterDkvOp::create(b, loc, s.ds, s.probs, op.getQ(), op.getDout(), token,
                       headBlock, idx, /*mask=*/Value(), op.getDkvAccum(),
                       group);
}

void decompose(SparseAttentionBwdOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  ConfigAttr cfg = op.getConfig();
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  Value c0 = index(0), c1 = index(1);
  Value headBlocks = index(cfg.getGroups() * cfg.getHeadBlocks());
  Value block = index(cfg.getBlock());
  Value tokens = memref::DimOp::create(b, loc, op.getQ(), 0);
  Value topk = memref::DimOp::create(b, loc, op.getIndices(), 2);
  Value numBlocks = arith::CeilDivUIOp::create(b, loc, topk, block);
  Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
  Scratch s = allocateScratch(b, loc, cfg);

  linalg::FillOp::create(b, loc, ValueRange{zero},
                         ValueRange{op.getDkvAccum()});
  scf::ForOp::create(
      b, loc, c0, tokens, c1, ValueRange{},
      [&](OpBuilder &b, Location loc, Value t, ValueRange) {
        // The index rows (and positions) of folded token t: tokens
        // n*t .. n*t + n - 1 (ConfigAttr `tokens`).
        SmallVector<Value, 2> indexTokens{t}, limits;
        if (cfg.getTokens() == 2) {
          Value first = arith::MulIOp::create(b, loc, t, index(2));
          indexTokens = {first, arith::AddIOp::create(b, loc, first, c1)};
        }
        for (Value it : indexTokens)
          limits.push_back(op.getPositions() ? memref::LoadOp::create(
                                                   b, loc, op.getPositions(),
                                                   it)
                                                   .getResult()
                                             : Value());
        // With topk_length: the token's slots, min(K, max(0, length[t])),
        // and only the blocks that hold any of them.
        Value length, blocks = numBlocks;
        if (Value lengths = op.getTopkLength()) {
          Value n = arith::IndexCastOp::create(
              b, loc, b.getIndexType(),
              memref::LoadOp::create(b, loc, lengths, t));
          length = arith::MinSIOp::create(
              b, loc, arith::MaxSIOp::create(b, loc, n, c0), topk);
          blocks = arith::CeilDivUIOp::create(b, loc, length, block);
        }
        // One step per head block; without a split, head block = group.
        scf::ForOp::create(
            b, loc, c0, headBlocks, c1, ValueRange{},
            [&](OpBuilder &b, Location loc, Value hb, ValueRange) {
              Value g = hb;
              if (cfg.getHeadBlocks() > 1)
                g = arith::DivUIOp::create(
                    b, loc, hb,
                    arith::ConstantIndexOp::create(b, loc,
                                                   cfg.getHeadBlocks()));
              DeltaOp::create(b, loc, op.getO(), op.getDout(), t, hb,
                              op.getDelta(), s.delta);
              linalg::FillOp::create(b, loc, ValueRange{zero},
                                     ValueRange{s.dqAcc});
              scf::ForOp::create(
                  b, loc, c0, blocks, c1, ValueRange{},
                  [&](OpBuilder &b, Location loc, Value blk, ValueRange) {
                    Value offset = arith::MulIOp::create(b, loc, blk, block);
                    emitBlock(b, loc, op, s, t, g, hb, offset, indexTokens,
                              limits, length);
                    scf::YieldOp::create(b, loc);
                  });
              StoreDqOp::create(b, loc, s.dqAcc, op.getDq(), t, hb,
                                op.getCounters());
              scf::YieldOp::create(b, loc);
            });
        scf::YieldOp::create(b, loc);
      });
  // The bf16 result is rounded from the accumulator; either result's
  // non-finite rows are counted once every scatter has landed.
  if (op.getDkv() || op.getCounters())
    CastDkvOp::create(b, loc, op.getDkvAccum(), op.getDkv(),
                      op.getCounters());
  op.erase();
}

struct SMLADecomposePass
    : public mlir::smla::impl::SMLADecomposeBase<SMLADecomposePass> {
  void runOnOperation() override {
    SmallVector<SparseAttentionBwdOp> ops;
    getOperation()->walk([&](SparseAttentionBwdOp op) { ops.push_back(op); });
    for (SparseAttentionBwdOp op : ops)
      decompose(op);
  }
};
} // namespace
