//===- TokenPairs.h - Key sharing between neighbouring tokens -*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// A bwd CTA reduces its block's dKV rows once for all the query rows it
// holds. At H = 16 a CTA of one token reduces every (token, slot) on its
// own, and those reductions bound B2 (docs/performance.md). Neighbouring
// DSA tokens select mostly the same keys, so a CTA of two tokens (a kernel
// compiled with tokens = 2: 32 rows) that walks the union of their keys
// reduces each shared key once.
//
// The kernel walks two index rows in lockstep, so the op hands it aligned
// rows: for pair (2p, 2p + 1), both rows list the union of the pair's
// in-range keys in ascending order, each slot holding the key where the
// token selected it and -1 where it did not. The rows are valid index rows
// of their tokens (the same keys, extra -1 padding), so dq and dkv are
// those of the given indices up to fp32 summation order; the invalid-slot
// counter is corrected for the padding.
//
// Chosen per call: when the library has the folded kernel, T is even and
// G = 1, and (SMLA_PAIRS=auto) the union is short enough to pay: the
// rows' mean length at most kMaxUnionRatio x K. The rows are built on the
// device by the library's pair-union kernel (smla.pair_union: one CTA per
// pair, a hash table in shared memory), W >= 2K slots per token; the
// kernel also writes each pair's length (K + its union's keys past the
// first row), and the pair kernel's CTA walks only the blocks below it.
// Where a token's dq row holds W >= 2K int32 (H (D + Dt) x the dq element
// size >= 8K bytes: B2's and B3's 18 KB against 16 KB), token t's aligned
// row lives in dq's memory of token t, so the pairs take no workspace
// (the memory bound: the fp32 dKV buffer + O(T H)). That is safe
// because the pair kernel's CTA of pair p is the only reader of rows 2p
// and 2p + 1 and the only writer of their dq, which it stores after a CTA
// barrier that follows its last index read (smla-gpu-map), and every dq
// element is written. Otherwise the rows (2K slots) take a workspace, in
// chunks of pairs whose rows fit kPairRowsBytes. A pair
// whose row repeats a key, or whose K exceeds the union kernel's scratch,
// gets the disjoint layout (length 2K): still valid rows, at the cost of
// two tokens. Under auto the first chunk's lengths decide: read back by
// the call that finds a key unmeasured (device, K, H, D + Dt: not T or S_kv, which
// change every micro-batch in packed training), then measured again on
// every kProbeEvery-th call without waiting, a later call taking the
// answer; the calls between, and a CUDA graph capture, follow the last
// answer. Random indices (B2r) pay one chunk's build once in a while.
// alignedPairRows is the same construction in ATen ops (sorted rows): the
// tests' reference layout; it returns the union in ascending key order,
// the kernel in the first row's order.
//
// Settings (PairsOptions, Options.h; smla.config): pairs = auto|on|off
// (SMLA_PAIRS; on: whenever possible, however long the union; a call that
// cannot is an error saying why), pairs_chunk (pairs per launch; tests),
// pairs_rows = dq|workspace (workspace: the rows in a workspace even where
// dq holds them; for tests and measurements).
//
// A given Delta (the bwd kernels' `delta` parameter, [T, H] fp32) is the
// same memory as the pair kernel's [T / 2, 2H] rows: token 2p's H values,
// then token 2p + 1's, so the pair kernel takes the same pointer.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_TOKENPAIRS_H
#define SMLA_PYTHON_TOKENPAIRS_H

#include "LaunchArgs.h"
#include "Options.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace smla::ext {

/// The pair kernel against the one-token kernel on B2 (`bench/bench_bwd.py
/// --shapes B2`, SMLA_PAIRS=on against off): 13.2 ms over unions of 1.23 K
/// slots against 15.3 ms, i.e. it pays while the union stays under ~1.4 K;
/// the build costs on top.
inline constexpr double kMaxUnionRatio = 1.35;

/// How a call measures the union of its pairs (SMLA_PAIRS=auto): not at
/// all, on the first chunk with a read-back (a key not measured yet), or
/// on the first chunk without waiting (every kProbeEvery-th call after; a
/// later call takes the answer).
enum class PairsProbe { None, Wait, Async };

/// Whether a call runs on pairs (before a Wait probe's answer), how it
/// measures, and why (for smla's debug log).
struct PairsTry {
  bool run = false;
  PairsProbe probe = PairsProbe::None;
  const char *why = "";
};

/// `available` says the library has the tokens = 2 kernel and its
/// pair-union kernel for the call. Under pairs=on a call that cannot
/// run on pairs is an error saying why.
PairsTry tryTokenPairs(PairsMode mode, const BwdArgs &args, const BwdSizes &n,
                       bool available);

/// Records a measurement of the first chunk's pair lengths ([P] int32 on
/// the device) for the call's key: with PairsProbe::Wait it reads it back
/// and returns whether pairs pay (mean length at most kMaxUnionRatio x K);
/// with Async it returns the last answer and leaves this one for a later
/// call to read.
bool pairsPay(const BwdArgs &args, const BwdSizes &n,
              const at::Tensor &lengths, PairsProbe probe);

/// The most bytes of aligned rows one chunk of pairs builds in a
/// workspace (rows that do not fit in dq): 128 MiB, the rows of 8192
/// tokens at K = 2048. In two launches of 64 MiB each, B2 took 9.27-9.52
/// ms against 9.00-9.24 for one (`bench/bench_bwd.py --shapes B2` with
/// SMLA_PAIRS_CHUNK=2048 and unset, in alternating rounds): a chunk
/// boundary drains the GPU.
inline constexpr int64_t kPairRowsBytes = int64_t(128) << 20;

/// The int32 slots of one token's row of `dq` ([T, H, D + Dt],
/// contiguous) when they hold an aligned row of 2K slots, else 0 (the
/// rows then take a workspace).
int64_t pairRowsInDq(const at::Tensor &dq, int64_t K);

/// Pairs per launch: all of them for rows in dq; in a workspace, the rows
/// a chunk builds (2K slots per token) stay within kPairRowsBytes, in
/// chunks of equal size, at least one pair. pairs_chunk overrides.
int64_t pairChunk(const PairsOptions &env, const BwdSizes &n,
                  bool rowsInDq);

/// The slots past K that the pair kernel of `block`-slot blocks walked
/// and counted as invalid, over all pairs of `lengths` ([T / 2] int32 from
/// the pair-union kernel) in rows of `width` >= 2K slots: 2 x
/// (min(width, lengths[p] rounded up to a block) - K) per pair, an int64
/// scalar on the device.
at::Tensor paddingSlots(const at::Tensor &lengths, int64_t K, int64_t width,
                        int64_t block);

/// The aligned index rows of token pairs (2p, 2p + 1) of `indices`
/// ([T, 1, K] int32, T even) into S_kv rows, built with ATen ops in
/// ascending key order, and U; `duplicate` is set when some row selects
/// an in-range key twice (the rows are then not usable). One
/// device-to-host copy. The op's reference layout, for tests and the CPU.
at::Tensor alignedPairRows(const at::Tensor &indices, int64_t S_kv,
                           int64_t &slots, bool &duplicate);

} // namespace smla::ext

#endif // SMLA_PYTHON_TOKENPAIRS_H
