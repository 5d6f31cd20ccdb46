//===- KernelSelection.cpp - Picking the kernel for a configuration -------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// A request matches a kernel when every field the kernel's config states is
// equal to the requested one. The manifest lists preferred variants first, so
// the first match wins. With no match, the error lists the kernels of the
// requested kind that differ in the fewest fields, and how they differ.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Error.h"
#include "smla/runtime/Manifest.h"
#include "smla/runtime/Sha256.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace smla::runtime {

static const char *lseBaseName(LseBase base) {
  return base == LseBase::Two ? "2" : "e";
}

const char *paramTypeName(ParamType type) {
  switch (type) {
  case ParamType::Ptr:
    return "ptr";
  case ParamType::I32:
    return "i32";
  case ParamType::I64:
    return "i64";
  case ParamType::F32:
    return "f32";
  }
  return "?";
}

size_t paramTypeSize(ParamType type) {
  return type == ParamType::I32 || type == ParamType::F32 ? 4 : 8;
}

std::string KernelConfig::str() const {
  std::string out;
  auto add = [&](const char *key, const std::string &value) {
    out += (out.empty() ? "" : " ") + std::string(key) + "=" + value;
  };
  if (d)
    add("d", std::to_string(*d));
  if (dt)
    add("dt", std::to_string(*dt));
  if (heads)
    add("h", std::to_string(*heads));
  if (groups)
    add("g", std::to_string(*groups));
  if (lseBase)
    add("lse_base", lseBaseName(*lseBase));
  if (positions)
    add("positions", *positions ? "1" : "0");
  if (block)
    add("block", std::to_string(*block));
  if (tokens && *tokens != 1)
    add("tokens", std::to_string(*tokens));
  if (dqType)
    add("dq_type", *dqType);
  if (dkvType)
    add("dkv_type", *dkvType);
  return out;
}

std::string KernelEntry::describe() const {
  return "kernel '" + name + "' (" + config.str() + ")";
}

std::string KernelRequest::str() const {
  std::string out =
      "kind=" + kind + " d=" + std::to_string(d) + " dt=" + std::to_string(dt) +
      " h=" + std::to_string(heads) + " g=" + std::to_string(groups) +
      " lse_base=" + lseBaseName(lseBase) +
      " positions=" + (positions ? "1" : "0");
  if (block)
    out += " block=" + std::to_string(*block);
  if (tokens != 1)
    out += " tokens=" + std::to_string(tokens);
  return out + " dq_type=" + dqType + " dkv_type=" + dkvType;
}

/// Calls `onDifference(key, shown)` for each field in which `config`
/// contradicts `request`, in a fixed order, until it returns false;
/// `shown()` formats the kernel's value. The one statement of what serves
/// a request: `serves` stops at the first difference without formatting
/// anything (the per-call path), `differences` lists them for errors.
template <typename F>
static void eachDifference(const KernelConfig &config,
                           const KernelRequest &request, F &&onDifference) {
  bool going = true;
  auto check = [&](const auto &have, const auto &want, const char *key,
                   auto shown) {
    if (going && have && *have != want)
      going = onDifference(key, shown);
  };
  auto num = [](const std::optional<int64_t> &v) {
    return [v] { return v ? std::to_string(*v) : std::string(); };
  };
  check(config.d, request.d, "d", num(config.d));
  check(config.dt, request.dt, "dt", num(config.dt));
  check(config.heads, request.heads, "h", num(config.heads));
  check(config.groups, request.groups, "g", num(config.groups));
  check(config.lseBase, request.lseBase, "lse_base", [&] {
    return std::string(config.lseBase ? lseBaseName(*config.lseBase) : "");
  });
  check(config.positions, request.positions, "positions", [&] {
    return std::string(config.positions && *config.positions ? "1" : "0");
  });
  if (request.block)
    check(config.block, *request.block, "block", num(config.block));
  // A kernel that folds tokens serves only requests for that many.
  std::optional<int64_t> tokens = config.tokens.value_or(1);
  check(tokens, request.tokens, "tokens", num(tokens));
  check(config.dqType, request.dqType, "dq_type",
        [&] { return config.dqType.value_or(""); });
  check(config.dkvType, request.dkvType, "dkv_type",
        [&] { return config.dkvType.value_or(""); });
}

/// The fields in which `config` contradicts `request`, as "key=value" of the
/// kernel; empty when the kernel serves the request.
static std::vector<std::string> differences(const KernelConfig &config,
                                            const KernelRequest &request) {
  std::vector<std::string> out;
  eachDifference(config, request, [&](const char *key, const auto &shown) {
    out.push_back(std::string(key) + "=" + shown());
    return true;
  });
  return out;
}

static bool serves(const KernelConfig &config, const KernelRequest &request) {
  bool differs = false;
  eachDifference(config, request, [&](const char *, const auto &) {
    differs = true;
    return false;
  });
  return !differs;
}

const KernelEntry *Manifest::match(const KernelRequest &request) const {
  for (const KernelEntry &kernel : kernels)
    if (kernel.kind == request.kind && serves(kernel.config, request))
      return &kernel;
  return nullptr;
}

const KernelEntry &Manifest::select(const KernelRequest &request) const {
  static constexpr size_t kClosestShown = 3;
  if (const KernelEntry *kernel = match(request))
    return *kernel;
  // No match: what each kernel of the kind differs in. (A kernel with no
  // difference here would contradict `match`; the tests check they agree.)
  struct Candidate {
    const KernelEntry *kernel;
    std::vector<std::string> diffs;
  };
  std::vector<Candidate> candidates;
  std::set<std::string> kinds;
  for (const KernelEntry &kernel : kernels) {
    kinds.insert(kernel.kind);
    if (kernel.kind != request.kind)
      continue;
    std::vector<std::string> diffs = differences(kernel.config, request);
    if (diffs.empty())
      return kernel;
    candidates.push_back({&kernel, std::move(diffs)});
  }

  std::string message =
      "smla: no kernel variant matches the request " + request.str();
  if (candidates.empty()) {
    message += "; the manifest has no kernel of kind '" + request.kind +
               "' (kinds present:";
    for (const std::string &kind : kinds)
      message += " " + kind;
    throw Error(message + (kinds.empty() ? " none)" : ")"));
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return a.diffs.size() < b.diffs.size();
                   });
  message += "; closest available:";
  for (size_t i = 0; i < candidates.size() && i < kClosestShown; ++i) {
    message += "\n  " + candidates[i].kernel->describe() + " differs in";
    for (const std::string &diff : candidates[i].diffs)
      message += " " + diff;
  }
  if (candidates.size() > kClosestShown)
    message += "\n  (" + std::to_string(candidates.size() - kClosestShown) +
               " more of kind '" + request.kind + "')";
  throw Error(message);
}

std::string Manifest::deviceMismatch(int major, int minor) const {
  const std::string device = "compute capability " + std::to_string(major) +
                             "." + std::to_string(minor) + " (sm_" +
                             std::to_string(major) + std::to_string(minor) +
                             ")";
  // "sm_" digits [suffix]: the last digit is the minor version.
  size_t digits = 3;
  while (digits < target.size() && std::isdigit(static_cast<unsigned char>(
                                       target[digits])))
    ++digits;
  std::string suffix = digits < target.size() ? target.substr(digits) : "";
  // Two or three digits: sm_90, sm_100 (a longer run is no architecture).
  if (target.rfind("sm_", 0) != 0 || digits < 5 || digits > 6 ||
      suffix.size() > 1)
    return "the kernel library's target '" + target +
           "' is not an sm_XY architecture; the device has " + device;
  int number = 0;
  for (size_t i = 3; i < digits; ++i)
    number = number * 10 + (target[i] - '0');
  int wantMajor = number / 10, wantMinor = number % 10;
  bool exact = suffix == "a";
  bool runs = major == wantMajor &&
              (exact ? minor == wantMinor : minor >= wantMinor);
  if (runs)
    return "";
  std::string capability =
      std::to_string(wantMajor) + "." + std::to_string(wantMinor);
  return "the kernel library targets " + target + ", which runs only on " +
         (exact ? "devices of compute capability " + capability
                : "compute capability " + capability + " up to " +
                      std::to_string(wantMajor) + ".9") +
         (target == "sm_90a" ? " (H100, H200)" : "") + "; the device has " +
         device;
}

void verifyCubin(const KernelEntry &kernel, std::string_view cubin) {
  std::string actual = sha256Hex(cubin);
  if (actual != kernel.sha256)
    throw Error("smla: cubin '" + kernel.cubin + "' of " + kernel.describe() +
                " has sha256 " + actual + ", but the manifest expects " +
                kernel.sha256 +
                "; the cubin and the manifest come from different builds");
}

} // namespace smla::runtime
