//===- Options.h - The op's settings, handed over by smla.config -*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// The settings the launch op reads: the slot walk (SlotWalk.h) and the
// token pairs (TokenPairs.h). smla.config reads them from the SMLA_*
// environment variables once (at import and on smla.reload_config()) and
// hands them over with smla._C.set_options whenever they change
// (smla/_compiled.py); nothing here reads the environment. A call takes a
// copy of the settings in force when it starts.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_PYTHON_OPTIONS_H
#define SMLA_PYTHON_OPTIONS_H

#include <cstdint>

namespace smla::ext {

/// SMLA_WALK*; -1: unset (the op's default).
struct WalkOptions {
  enum Mode { Auto, Sorted, Given } mode = Auto;
  int64_t period = -1, chunkTokens = -1;
  /// The L2 size the auto choice compares with (default: the device's).
  int64_t l2Bytes = -1;
};

enum class PairsMode { Auto, On, Off };

/// SMLA_PAIRS, SMLA_PAIRS_CHUNK (pairs per launch; -1: unset) and
/// SMLA_PAIRS_ROWS (false: workspace).
struct PairsOptions {
  PairsMode mode = PairsMode::Auto;
  int64_t chunk = -1;
  bool rowsInDq = true;
};

struct OpOptions {
  WalkOptions walk;
  PairsOptions pairs;
};

/// Replaces the settings in force (thread safe).
void setOpOptions(const OpOptions &options);

/// A copy of the settings in force (thread safe).
OpOptions opOptions();

} // namespace smla::ext

#endif // SMLA_PYTHON_OPTIONS_H
