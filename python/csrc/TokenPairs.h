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
// Chosen per call: when the library has the folded kernel, T is even,
// G = 1, no row selects a key twice, and the union is short enough to pay
// (at most kMaxUnionRatio x K slots). The rows are built on the device by
// the library's pair-union kernel (smla.pair_union: one CTA per pair, a
// hash table in shared memory), whose per-pair counts are read back once
// (the union's length); a shape whose union was too long is re-measured
// only every kProbeEvery-th call, so random indices (B2r) pay the build
// once in a while. alignedPairRows is the same construction in ATen ops
// (sorted rows), for the CPU and as the tests' reference layout; it
// returns the union in ascending key order, the kernel in the first
// row's order.
//
// Environment: SMLA_PAIRS=auto|on|off (on: whenever possible, however
// long the union).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_TOKENPAIRS_H
#define SMLA_PYTHON_TOKENPAIRS_H

#include "ArgumentChecks.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

namespace smla::ext {

/// The pair kernel against the one-token kernel on B2 (ninth and tenth
/// sessions): 13.2-13.4 ms over unions of 1.196 K (padded to 1.25 K)
/// against 15.3 ms, i.e. it pays while the union stays under ~1.4 K;
/// the build costs on top.
inline constexpr double kMaxUnionRatio = 1.35;

enum class PairsMode { Auto, On, Off };

/// Reads and checks SMLA_PAIRS (an error names the variable).
PairsMode readPairsMode();

struct TokenPairs {
  bool use = false;
  /// [T, 1, U] int32: the aligned rows (valid when `use`).
  at::Tensor indices;
  /// U, the slots per aligned row.
  int64_t slots = 0;
};

/// Builds the aligned rows of a call's token pairs: returns [T, 1, U]
/// int32 rows and sets U, or sets `status` to kRepeatedKey (a row selects
/// an in-range key twice) or kTopkTooLarge (beyond the builder's scratch).
using PairRowBuilder =
    std::function<at::Tensor(int64_t &slots, int64_t &status)>;
inline constexpr int64_t kRepeatedKey = -1, kTopkTooLarge = -2;

/// Whether this call runs on token pairs and, if so, their aligned rows.
/// `available`: the library has a tokens = 2 kernel for the call (and
/// `build` runs its pair-union kernel).
TokenPairs chooseTokenPairs(PairsMode mode, const BwdArgs &args,
                            const BwdSizes &n, bool available,
                            const PairRowBuilder &build);

/// The aligned index rows of token pairs (2p, 2p + 1) of `indices`
/// ([T, 1, K] int32, T even) into S_kv rows, and U; `duplicate` is set
/// when some row selects an in-range key twice (the rows are then not
/// usable). One device-to-host copy.
at::Tensor alignedPairRows(const at::Tensor &indices, int64_t S_kv,
                           int64_t &slots, bool &duplicate);

} // namespace smla::ext

#endif // SMLA_PYTHON_TOKENPAIRS_H
