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
// hash table in shared memory) in chunks of pairs whose rows fit the
// sorted walk's workspace (64 MiB); each chunk's per-pair counts are read
// back once (the union's length) and the chunk runs on pairs or, if its
// rows do not pay or cannot be used, on the per-token kernel. A shape
// whose first chunk did not run on pairs is tried again only every
// kProbeEvery-th call, so random indices (B2r) pay the build once in a
// while. alignedPairRows is the same construction in ATen ops (sorted
// rows): the tests' reference layout; it returns the union in ascending
// key order, the kernel in the first row's order.
//
// Environment: SMLA_PAIRS=auto|on|off (on: whenever possible, however
// long the union; a call that cannot is an error saying why),
// SMLA_PAIRS_CHUNK=<pairs per launch> (tests).
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_TOKENPAIRS_H
#define SMLA_PYTHON_TOKENPAIRS_H

#include "ArgumentChecks.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace smla::ext {

/// The pair kernel against the one-token kernel on B2 (ninth and tenth
/// sessions): 13.2 ms over unions of 1.23 K slots against 15.3 ms, i.e. it
/// pays while the union stays under ~1.4 K; the build costs on top.
inline constexpr double kMaxUnionRatio = 1.35;

enum class PairsMode { Auto, On, Off };

/// SMLA_PAIRS and SMLA_PAIRS_CHUNK (pairs per launch; -1: unset).
struct PairsEnvironment {
  PairsMode mode = PairsMode::Auto;
  int64_t chunk = -1;
};

/// Reads and checks the environment (an error names the variable).
PairsEnvironment readPairsEnvironment();

/// What the pair-union kernel reported for a chunk: its rows' slots U, or
/// a status (a row repeats an in-range key; top-k beyond its scratch).
inline constexpr int64_t kRepeatedKey = -1, kTopkTooLarge = -2;

/// Whether this call tries token pairs: `available` says the library has
/// the tokens = 2 kernel and its pair-union kernel for the call. Under
/// SMLA_PAIRS=on a call that cannot is an error saying why.
bool tryTokenPairs(PairsMode mode, const BwdArgs &args, const BwdSizes &n,
                   bool available);

/// Whether a chunk whose rows came back with `status` (0 or one of the
/// above) and `slots` runs on pairs; under SMLA_PAIRS=on an error if not.
bool pairsPay(PairsMode mode, const BwdSizes &n, int64_t status,
              int64_t slots);

/// Remembers whether the auto choice ran this shape on pairs.
void recordPairs(const BwdArgs &args, const BwdSizes &n, bool used);

/// Pairs per launch: the rows a chunk builds (2K slots per token, then
/// cut to U <= 2K) stay within kSortWorkspaceBytes (SlotWalk.h), in whole
/// waves of `resident` CTAs where that allows, at least one pair;
/// SMLA_PAIRS_CHUNK overrides.
int64_t pairChunk(const PairsEnvironment &env, const BwdSizes &n,
                  int64_t resident);

/// The aligned index rows of token pairs (2p, 2p + 1) of `indices`
/// ([T, 1, K] int32, T even) into S_kv rows, built with ATen ops in
/// ascending key order, and U; `duplicate` is set when some row selects
/// an in-range key twice (the rows are then not usable). One
/// device-to-host copy. The op's reference layout, for tests and the CPU.
at::Tensor alignedPairRows(const at::Tensor &indices, int64_t S_kv,
                           int64_t &slots, bool &duplicate);

} // namespace smla::ext

#endif // SMLA_PYTHON_TOKENPAIRS_H
