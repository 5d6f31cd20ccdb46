//===- Options.cpp - The op's settings, handed over by smla.config --------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "Options.h"

#include <mutex>

namespace smla::ext {
namespace {

struct State {
  std::mutex mutex;
  OpOptions options;
};

State &state() {
  static auto *s = new State();
  return *s;
}

} // namespace

void setOpOptions(const OpOptions &options) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.options = options;
}

OpOptions opOptions() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.options;
}

} // namespace smla::ext
