//===- LowerPairUnion.cpp - smla.pair_union as CTA-cooperative code -------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
// One CTA builds the aligned rows of one token pair (SMLAOps.td has the
// contract) in four phases separated by barriers:
//   1. the first row's valid keys go into an open-addressing hash table in
//      shared memory (key -> slot), by compare-and-swap (relaxed, CTA
//      scope) with linear probing;
//      a key already there is a repeat;
//   2. the second row's valid keys: found with a slot, the entry is marked
//      shared (bit 30 of its position, an atomic or: a second mark is a
//      repeat); not found, it is inserted as the second row's own (position
//      kOwn; finding such an entry is a repeat);
//   3. an exclusive prefix count of the second row's own keys (per thread
//      over a run of slots, then across threads, Hillis-Steele) ranks them;
//   4. the rows are written: slots < K from the first row (the second gets
//      a key where its entry is marked shared), the second row's own keys
//      at K + rank, -1 to the end of the row (W = dim 2 of rows, >= 2K);
//      lengths[p] = K + the own keys.
// A repeat (flagged in phases 1 and 2) or a K beyond the scratch writes
// the disjoint layout instead (first row below K, second from K to 2K, -1
// from 2K to W; lengths[p] = 2K), which needs no table.
// Every loop is bounded: the table is at least twice the keys it holds,
// so a probe finds the key or an empty entry.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/SMLAToNVVM/CtaEmitter.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::smla;

namespace {
constexpr int32_t kEmpty = -1; // a free table entry
constexpr int32_t kOwn = -2;   // a key only the second row selected
constexpr int32_t kShared = 1 << 30;

struct UnionEmitter {
  CtaEmitter &e;
  PairUnionOp op;
  int64_t tableSize;

  OpBuilder &b() { return e.b; }
  Value i32(OpBuilder &b, int64_t v) {
    return arith::ConstantOp::create(b, e.loc, b.getI32IntegerAttr(v));
  }
  Value idx(OpBuilder &b, int64_t v) {
    return arith::ConstantIndexOp::create(b, e.loc, v);
  }
  void barrier() { gpu::BarrierOp::create(e.b, e.loc); }

  /// indices[token, 0, slot] and whether it is a valid key.
  std::pair<Value, Value> key(OpBuilder &b, Value token, Value slot) {
    Location loc = e.loc;
    Value k = memref::LoadOp::create(b, loc, op.getIndices(),
                                     ValueRange{token, idx(b, 0), slot});
    Value bound = arith::IndexCastOp::create(b, loc, b.getI32Type(),
                                             op.getBound());
    Value ok = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, k, i32(b, 0)),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, k, bound));
    return {k, ok};
  }

  /// The first table entry to probe for `k` (multiplicative hashing).
  Value home(OpBuilder &b, Value k) {
    Location loc = e.loc;
    Value h = arith::MulIOp::create(b, loc, k, i32(b, 0x9E3779B1ll - (1ll << 32)));
    h = arith::ShRUIOp::create(b, loc, h,
                               i32(b, 32 - llvm::Log2_64(tableSize)));
    return arith::IndexCastUIOp::create(b, loc, b.getIndexType(), h);
  }

  Value next(OpBuilder &b, Value h) {
    Value n = arith::AddIOp::create(b, e.loc, h, idx(b, 1));
    return arith::AndIOp::create(b, e.loc, n, idx(b, tableSize - 1));
  }

  /// keys[h] = k if it holds kEmpty; returns what it held. A relaxed
  /// compare-and-swap at CTA scope (inline PTX): memref.generic_atomic_rmw
  /// becomes an acq_rel CAS at system scope, whose fences were 38% of the
  /// kernel's stalls (`bench/ncu-profile.sh` on the union kernel at B2).
  /// No ordering is needed: each phase only reads what an earlier phase
  /// wrote before a barrier.
  Value casEmpty(OpBuilder &b, Value h, Value k) {
    Location loc = e.loc;
    Value base =
        memref::ExtractAlignedPointerAsIndexOp::create(b, loc, op.getKeys());
    Value addr = arith::AddIOp::create(
        b, loc, base, arith::MulIOp::create(b, loc, h, idx(b, 4)));
    Value addr64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), addr);
    Value p = LLVM::IntToPtrOp::create(
        b, loc, LLVM::LLVMPointerType::get(b.getContext(), 3), addr64);
    auto cas = LLVM::InlineAsmOp::create(
        b, loc, TypeRange{b.getI32Type()}, ValueRange{p, i32(b, kEmpty), k},
        "atom.relaxed.cta.shared.cas.b32 $0, [$1], $2, $3;", "=r,l,r,r",
        /*has_side_effects=*/true, /*is_align_stack=*/false,
        LLVM::TailCallKind::None,
        LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
        ArrayAttr());
    return cas.getResult(0);
  }

  /// Claims an entry for `k`: returns the entry and the value it held
  /// (kEmpty: claimed now; k: already there).
  std::pair<Value, Value> claim(OpBuilder &b, Value k) {
    Location loc = e.loc;
    Type i32t = b.getI32Type(), it = b.getIndexType();
    auto loop = scf::WhileOp::create(
        b, loc, TypeRange{it, i32t}, ValueRange{home(b, k), i32(b, kEmpty)},
        [&](OpBuilder &wb, Location l, ValueRange args) {
          Value old = casEmpty(wb, args[0], k);
          Value done = arith::OrIOp::create(
              wb, l,
              arith::CmpIOp::create(wb, l, arith::CmpIPredicate::eq, old,
                                    i32(wb, kEmpty)),
              arith::CmpIOp::create(wb, l, arith::CmpIPredicate::eq, old, k));
          Value again =
              arith::XOrIOp::create(wb, l, done,
                                    arith::ConstantOp::create(
                                        wb, l, wb.getBoolAttr(true)));
          scf::ConditionOp::create(wb, l, again, ValueRange{args[0], old});
        },
        [&](OpBuilder &wb, Location l, ValueRange args) {
          scf::YieldOp::create(wb, l, ValueRange{next(wb, args[0]), args[1]});
        });
    return {loop.getResult(0), loop.getResult(1)};
  }

  /// The entry holding `k`, which phase 1 or 2 put in the table.
  Value find(OpBuilder &b, Value k) {
    Location loc = e.loc;
    auto loop = scf::WhileOp::create(
        b, loc, TypeRange{b.getIndexType()}, ValueRange{home(b, k)},
        [&](OpBuilder &wb, Location l, ValueRange args) {
          Value held = memref::LoadOp::create(wb, l, op.getKeys(), args[0]);
          Value miss =
              arith::CmpIOp::create(wb, l, arith::CmpIPredicate::ne, held, k);
          scf::ConditionOp::create(wb, l, miss, args);
        },
        [&](OpBuilder &wb, Location l, ValueRange args) {
          scf::YieldOp::create(wb, l, next(wb, args[0]));
        });
    return loop.getResult(0);
  }

  void ifThen(OpBuilder &b, Value cond,
              function_ref<void(OpBuilder &)> body) {
    scf::IfOp::create(b, e.loc, cond, [&](OpBuilder &tb, Location l) {
      body(tb);
      scf::YieldOp::create(tb, l);
    });
  }

  void store(OpBuilder &b, Value v, Value memref, ValueRange at) {
    memref::StoreOp::create(b, e.loc, v, memref, at);
  }

  /// The disjoint layout: the first row's valid keys at slots < K, the
  /// second's at K + j, -1 elsewhere (to W); lengths[p] = 2K.
  void writeDisjoint(OpBuilder &b, Value first, Value second, Value topk,
                     Value width, Value lead) {
    Location loc = e.loc;
    Value both = arith::MulIOp::create(b, loc, topk, idx(b, 2));
    fillTail(b, first, second, both, width);
    e.ctaLoop(topk, [&](OpBuilder &lb, Value i) {
      Value minus = i32(lb, -1), zero = idx(lb, 0);
      Value hi = arith::AddIOp::create(lb, loc, topk, i);
      std::pair<Value, Value> a = key(lb, first, i);
      std::pair<Value, Value> bk = key(lb, second, i);
      store(lb, arith::SelectOp::create(lb, loc, a.second, a.first, minus),
            op.getRows(), ValueRange{first, zero, i});
      store(lb, minus, op.getRows(), ValueRange{first, zero, hi});
      store(lb, minus, op.getRows(), ValueRange{second, zero, i});
      store(lb, arith::SelectOp::create(lb, loc, bk.second, bk.first, minus),
            op.getRows(), ValueRange{second, zero, hi});
    });
    ifThen(b, lead, [&](OpBuilder &tb) {
      store(tb, arith::IndexCastOp::create(tb, loc, tb.getI32Type(), both),
            op.getLengths(), op.getPair());
    });
  }

  /// -1 in both rows at slots [from, width).
  void fillTail(OpBuilder &b, Value first, Value second, Value from,
                Value width) {
    Location loc = e.loc;
    e.ctaLoop(arith::SubIOp::create(b, loc, width, from),
              [&](OpBuilder &lb, Value r) {
                Value at = arith::AddIOp::create(lb, loc, from, r);
                Value minus = i32(lb, -1), zero = idx(lb, 0);
                store(lb, minus, op.getRows(), ValueRange{first, zero, at});
                store(lb, minus, op.getRows(), ValueRange{second, zero, at});
              });
  }

  /// repeat |= cond: the flag is the last entry of `ranks`.
  void flagRepeat(OpBuilder &b, Value cond, Value flagAt) {
    ifThen(b, cond, [&](OpBuilder &tb) {
      memref::AtomicRMWOp::create(tb, e.loc, arith::AtomicRMWKind::ori,
                                  i32(tb, 1), op.getRanks(),
                                  ValueRange{flagAt});
    });
  }
};
} // namespace

void mlir::smla::lowerPairUnion(CtaEmitter &e, PairUnionOp op) {
  OpBuilder &b = e.b;
  Location loc = e.loc;
  int64_t tableSize = op.getKeys().getType().getDimSize(0);
  int64_t rankSlots = op.getRanks().getType().getDimSize(0);
  int64_t threads = e.threads;
  UnionEmitter u{e, op, tableSize};
  Value c0 = e.index(0), c1 = e.index(1), c2 = e.index(2);
  Value topk = memref::DimOp::create(b, loc, op.getIndices(), 2);
  Value width = memref::DimOp::create(b, loc, op.getRows(), 2);
  Value first = arith::MulIOp::create(b, loc, op.getPair(), c2);
  Value second = arith::AddIOp::create(b, loc, first, c1);
  Value flagAt = e.index(rankSlots - 1);
  // The table holds 2K keys at most half full and `ranks` K slots and the
  // repeat flag, else counts = -2 and nothing else is written.
  Value fits = arith::AndIOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle,
                            arith::MulIOp::create(b, loc, topk, e.index(4)),
                            e.index(tableSize)),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, topk, flagAt));
  Value lead =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, e.tid, c0);
  auto branch = scf::IfOp::create(b, loc, fits, /*withElse=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&branch.getElseRegion().front());
  u.writeDisjoint(b, first, second, topk, width, lead);
  b.setInsertionPointToStart(&branch.getThenRegion().front());

  // 0. An empty table, no own key yet, no repeat.
  e.ctaLoop(tableSize, [&](OpBuilder &lb, Value h) {
    u.store(lb, u.i32(lb, kEmpty), op.getKeys(), h);
    u.store(lb, u.i32(lb, kOwn), op.getPositions(), h);
  });
  e.ctaLoop(topk, [&](OpBuilder &lb, Value j) {
    u.store(lb, u.i32(lb, 0), op.getRanks(), j);
  });
  u.ifThen(b, lead, [&](OpBuilder &tb) {
    u.store(tb, u.i32(tb, 0), op.getRanks(), flagAt);
  });
  u.barrier();
  // Each valid key of `row` claims its table entry h; `body` gets the slot,
  // h and whether the entry was empty before the claim.
  using ClaimFn = function_ref<void(OpBuilder &, Value, Value, Value)>;
  auto claimRow = [&](Value row, ClaimFn body) {
    e.ctaLoop(topk, [&](OpBuilder &lb, Value i) {
      std::pair<Value, Value> kv = u.key(lb, row, i);
      u.ifThen(lb, kv.second, [&](OpBuilder &tb) {
        std::pair<Value, Value> slot = u.claim(tb, kv.first);
        Value fresh = arith::CmpIOp::create(
            tb, loc, arith::CmpIPredicate::eq, slot.second, u.i32(tb, kEmpty));
        body(tb, i, slot.first, fresh);
      });
    });
  };
  // 1. The first row's keys, with their slots.
  claimRow(first, [&](OpBuilder &tb, Value i, Value h, Value fresh) {
    u.ifThen(tb, fresh, [&](OpBuilder &fb) {
      u.store(fb, arith::IndexCastOp::create(fb, loc, fb.getI32Type(), i),
              op.getPositions(), h);
    });
    u.flagRepeat(tb, arith::XOrIOp::create(
                         tb, loc, fresh,
                         arith::ConstantOp::create(tb, loc,
                                                   tb.getBoolAttr(true))),
                 flagAt);
  });
  u.barrier();
  // 2. The second row's keys: shared ones marked, own ones inserted and
  // counted (ranks[j] = 1 until the scan).
  claimRow(second, [&](OpBuilder &tb, Value j, Value h, Value fresh) {
    auto kind = scf::IfOp::create(tb, loc, fresh, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard g(tb);
      tb.setInsertionPointToStart(&kind.getThenRegion().front());
      u.store(tb, u.i32(tb, 1), op.getRanks(), j);
      tb.setInsertionPointToStart(&kind.getElseRegion().front());
      Value before = memref::AtomicRMWOp::create(
          tb, loc, arith::AtomicRMWKind::ori, u.i32(tb, kShared),
          op.getPositions(), ValueRange{h});
      // An own key (kOwn < 0) or one marked before: a repeat.
      Value marked = arith::CmpIOp::create(
          tb, loc, arith::CmpIPredicate::ne,
          arith::AndIOp::create(tb, loc, before, u.i32(tb, kShared)),
          u.i32(tb, 0));
      Value own = arith::CmpIOp::create(tb, loc, arith::CmpIPredicate::slt,
                                        before, u.i32(tb, 0));
      u.flagRepeat(tb, arith::OrIOp::create(tb, loc, marked, own), flagAt);
    }
  });
  u.barrier();
  // 3. Exclusive ranks of the own keys: each thread sums a run of slots,
  // the runs' sums are scanned across threads, each run is rewritten.
  Value run = arith::CeilDivUIOp::create(b, loc, topk, e.index(threads));
  Value lo = arith::MinUIOp::create(
      b, loc, arith::MulIOp::create(b, loc, e.tid, run), topk);
  Value hi = arith::MinUIOp::create(b, loc, arith::AddIOp::create(b, loc, lo, run),
                                    topk);
  Value local = emitReduce(b, loc, lo, hi, c1, u.i32(b, 0),
                           [&](OpBuilder &rb, Value j, Value acc) -> Value {
                             Value v = memref::LoadOp::create(
                                 rb, loc, op.getRanks(), j);
                             return arith::AddIOp::create(rb, loc, acc, v);
                           });
  u.store(b, local, op.getPartials(), e.tid);
  u.barrier();
  for (int64_t d = 1; d < threads; d *= 2) {
    Value has = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, e.tid,
                                      e.index(d));
    auto add = scf::IfOp::create(
        b, loc, has,
        [&](OpBuilder &tb, Location l) {
          Value from = arith::SubIOp::create(tb, l, e.tid, u.idx(tb, d));
          scf::YieldOp::create(
              tb, l,
              ValueRange{memref::LoadOp::create(tb, l, op.getPartials(), from)
                             .getResult()});
        },
        [&](OpBuilder &tb, Location l) {
          scf::YieldOp::create(tb, l, ValueRange{u.i32(tb, 0)});
        });
    u.barrier();
    Value mine = memref::LoadOp::create(b, loc, op.getPartials(), e.tid);
    u.store(b, arith::AddIOp::create(b, loc, mine, add.getResult(0)),
            op.getPartials(), e.tid);
    u.barrier();
  }
  // Inclusive sums now: this run starts after the previous runs' keys.
  Value upTo = memref::LoadOp::create(b, loc, op.getPartials(), e.tid);
  Value total = memref::LoadOp::create(b, loc, op.getPartials(),
                                       e.index(threads - 1));
  Value start = arith::SubIOp::create(b, loc, upTo, local);
  emitReduce(b, loc, lo, hi, c1, start,
             [&](OpBuilder &rb, Value j, Value acc) -> Value {
               Value v = memref::LoadOp::create(rb, loc, op.getRanks(), j);
               u.store(rb, acc, op.getRanks(), j);
               return arith::AddIOp::create(rb, loc, acc, v);
             });
  u.barrier();
  // A repeat (the flag is final since phase 2): the disjoint layout.
  Value repeat = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ne,
      memref::LoadOp::create(b, loc, op.getRanks(), flagAt), u.i32(b, 0));
  auto aligned = scf::IfOp::create(b, loc, repeat, /*withElse=*/true);
  b.setInsertionPointToStart(&aligned.getThenRegion().front());
  u.writeDisjoint(b, first, second, topk, width, lead);
  b.setInsertionPointToStart(&aligned.getElseRegion().front());
  // 4. The rows.
  Value minus = u.i32(b, -1);
  e.ctaLoop(topk, [&](OpBuilder &lb, Value i) {
    std::pair<Value, Value> kv = u.key(lb, first, i);
    Value k = kv.first, ok = kv.second;
    auto shared = scf::IfOp::create(
        lb, loc, ok,
        [&](OpBuilder &tb, Location l) {
          Value pos = memref::LoadOp::create(tb, l, op.getPositions(),
                                             u.find(tb, k));
          Value bit = arith::AndIOp::create(tb, l, pos, u.i32(tb, kShared));
          scf::YieldOp::create(
              tb, l,
              ValueRange{arith::CmpIOp::create(tb, l, arith::CmpIPredicate::ne,
                                               bit, u.i32(tb, 0))
                             .getResult()});
        },
        [&](OpBuilder &tb, Location l) {
          scf::YieldOp::create(
              tb, l,
              ValueRange{arith::ConstantOp::create(tb, l, tb.getBoolAttr(false))
                             .getResult()});
        });
    u.store(lb, arith::SelectOp::create(lb, loc, ok, k, minus), op.getRows(),
            ValueRange{first, u.idx(lb, 0), i});
    u.store(lb, arith::SelectOp::create(lb, loc, shared.getResult(0), k, minus),
            op.getRows(), ValueRange{second, u.idx(lb, 0), i});
  });
  // The tail first (-1 from K + total to W), then the own keys at K +
  // rank: disjoint slots, so no barrier between them.
  Value own = arith::IndexCastUIOp::create(b, loc, b.getIndexType(), total);
  u.fillTail(b, first, second, arith::AddIOp::create(b, loc, topk, own),
             width);
  e.ctaLoop(topk, [&](OpBuilder &lb, Value j) {
    std::pair<Value, Value> kv = u.key(lb, second, j);
    Value k = kv.first, ok = kv.second;
    u.ifThen(lb, ok, [&](OpBuilder &tb) {
      Value pos = memref::LoadOp::create(tb, loc, op.getPositions(),
                                         u.find(tb, k));
      Value isOwn = arith::CmpIOp::create(tb, loc, arith::CmpIPredicate::slt,
                                          pos, u.i32(tb, 0));
      u.ifThen(tb, isOwn, [&](OpBuilder &ob) {
        Value rank = memref::LoadOp::create(ob, loc, op.getRanks(), j);
        Value at = arith::AddIOp::create(
            ob, loc, topk,
            arith::IndexCastUIOp::create(ob, loc, ob.getIndexType(), rank));
        u.store(ob, k, op.getRows(), ValueRange{second, u.idx(ob, 0), at});
        u.store(ob, minus, op.getRows(), ValueRange{first, u.idx(ob, 0), at});
      });
    });
  });
  u.ifThen(b, lead, [&](OpBuilder &tb) {
    Value length = arith::AddIOp::create(
        tb, loc, arith::IndexCastOp::create(tb, loc, tb.getI32Type(), topk),
        total);
    u.store(tb, length, op.getLengths(), op.getPair());
  });
}
