//===- KernelSelectionTest.cpp - Tests for variant selection --------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Error.h"
#include "smla/runtime/Manifest.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

using namespace smla::runtime;
using namespace smla::runtime::test;

namespace {

KernelJson bwd(const std::string &name, const std::string &config) {
  KernelJson kernel;
  kernel.name = name;
  kernel.config = config;
  return kernel;
}

Manifest variants() {
  KernelJson delta;
  delta.name = "delta_d512";
  delta.kind = "\"delta\"";
  delta.config = R"({"d": 512})";
  return Manifest::parse(manifestText({
      bwd("pos_lse2", bwdConfig(512, 64, 16, 1, "2", true)),
      bwd("nopos_lse2", bwdConfig(512, 64, 16, 1, "2", false)),
      bwd("pos_lsee", bwdConfig(512, 64, 16, 1, "\"e\"", true)),
      bwd("pos_lse2_h32", bwdConfig(512, 64, 32, 1, "2", true)),
      bwd("pos_lse2_b32",
          bwdConfig(512, 64, 16, 1, "2", true, "bf16", "f32", 32)),
      bwd("pos_lse2_dq32", bwdConfig(512, 64, 16, 1, "2", true, "f32", "f32")),
      delta,
  }));
}

KernelRequest glm(bool positions = true) {
  KernelRequest request; // GLM-5.2 per rank: D=512, Dt=64, H=16, G=1
  request.positions = positions;
  return request;
}

TEST(KernelSelection, PicksTheMatchingVariant) {
  Manifest manifest = variants();
  EXPECT_EQ(manifest.select(glm(true)).name, "pos_lse2");
  EXPECT_EQ(manifest.select(glm(false)).name, "nopos_lse2");
  KernelRequest natural = glm(true);
  natural.lseBase = LseBase::E;
  EXPECT_EQ(manifest.select(natural).name, "pos_lsee");
  KernelRequest h32 = glm(true);
  h32.heads = 32;
  EXPECT_EQ(manifest.select(h32).name, "pos_lse2_h32");
  KernelRequest fp32dq = glm(true);
  fp32dq.dqType = "f32";
  EXPECT_EQ(manifest.select(fp32dq).name, "pos_lse2_dq32");
}

/// bwdConfig with a "tokens" key (the folded token-pair kernels).
std::string foldedConfig(int heads, int tokens) {
  std::string config = bwdConfig(512, 64, heads, 1, "2", true);
  return config.substr(0, config.size() - 1) +
         ", \"tokens\": " + std::to_string(tokens) + "}";
}

TEST(KernelSelection, TokensMustMatchAndDefaultToOne) {
  // The pair kernel is listed first and has the heads of the 32-head
  // kernel: a one-token request must still not get it.
  Manifest manifest = Manifest::parse(manifestText({
      bwd("pairs_h16", foldedConfig(32, 2)),
      bwd("h32", bwdConfig(512, 64, 32, 1, "2", true)),
      bwd("h32_tokens1", foldedConfig(32, 1)),
  }));
  KernelRequest request = glm(true);
  request.heads = 32;
  EXPECT_EQ(manifest.select(request).name, "h32");
  request.tokens = 2;
  EXPECT_EQ(manifest.select(request).name, "pairs_h16");
  EXPECT_EQ(manifest.kernels[0].config.str(),
            "d=512 dt=64 h=32 g=1 lse_base=2 positions=1 block=64 tokens=2 "
            "dq_type=bf16 dkv_type=f32");
  request.heads = 16;
  EXPECT_NE(SMLA_ERROR_MESSAGE(manifest.select(request))
                .find("no kernel variant matches the request kind=bwd d=512 "
                      "dt=64 h=16 g=1 lse_base=2 positions=1 tokens=2"),
            std::string::npos);
  EXPECT_NE(SMLA_ERROR_MESSAGE(Manifest::parse(
                manifestText({bwd("bad", foldedConfig(32, 3))})))
                .find("config.tokens"),
            std::string::npos);
}

TEST(KernelSelection, BlockIsAnyUnlessRequestedAndFirstMatchWins) {
  Manifest manifest = variants();
  KernelRequest request = glm(true);
  EXPECT_EQ(manifest.select(request).name, "pos_lse2"); // listed first
  request.block = 32;
  EXPECT_EQ(manifest.select(request).name, "pos_lse2_b32");
}

TEST(KernelSelection, AbsentConfigFieldsAreWildcards) {
  Manifest manifest = variants();
  KernelRequest request = glm(false);
  request.kind = "delta";
  request.heads = 7; // the delta kernel's config states only d
  request.dt = 128;
  EXPECT_EQ(manifest.select(request).name, "delta_d512");
  request.d = 576;
  EXPECT_EQ(SMLA_ERROR_MESSAGE(manifest.select(request)),
            "smla: no kernel variant matches the request kind=delta d=576 "
            "dt=128 h=7 g=1 lse_base=2 positions=0 dq_type=bf16 dkv_type=f32; "
            "closest available:\n  kernel 'delta_d512' (d=512) differs in "
            "d=512");
}

TEST(KernelSelection, NoMatchListsTheClosestVariants) {
  Manifest manifest = variants();
  KernelRequest request = glm(true);
  request.groups = 2;
  request.dkvType = "bf16";
  std::string cfg = " (d=512 dt=64 h=16 g=1 lse_base=2 positions=1 block=64 "
                    "dq_type=bf16 dkv_type=f32)";
  EXPECT_EQ(
      SMLA_ERROR_MESSAGE(manifest.select(request)),
      "smla: no kernel variant matches the request kind=bwd d=512 dt=64 "
      "h=16 g=2 lse_base=2 positions=1 dq_type=bf16 dkv_type=bf16; "
      "closest available:\n"
      "  kernel 'pos_lse2'" +
          cfg +
          " differs in g=1 dkv_type=f32\n"
          "  kernel 'pos_lse2_b32' (d=512 dt=64 h=16 g=1 lse_base=2 "
          "positions=1 block=32 dq_type=bf16 dkv_type=f32) differs in g=1 "
          "dkv_type=f32\n"
          "  kernel 'nopos_lse2' (d=512 dt=64 h=16 g=1 lse_base=2 "
          "positions=0 block=64 dq_type=bf16 dkv_type=f32) differs in g=1 "
          "positions=0 dkv_type=f32\n"
          "  (3 more of kind 'bwd')");
}

TEST(KernelSelection, UnknownKindListsTheKindsPresent) {
  Manifest manifest = variants();
  KernelRequest request = glm(true);
  request.kind = "dkv_cast";
  EXPECT_EQ(SMLA_ERROR_MESSAGE(manifest.select(request)),
            "smla: no kernel variant matches the request kind=dkv_cast d=512 "
            "dt=64 h=16 g=1 lse_base=2 positions=1 dq_type=bf16 dkv_type=f32; "
            "the manifest has no kernel of kind 'dkv_cast' (kinds present: bwd "
            "delta)");
  EXPECT_EQ(
      SMLA_ERROR_MESSAGE(Manifest::parse(manifestText({})).select(request)),
      "smla: no kernel variant matches the request kind=dkv_cast d=512 "
      "dt=64 h=16 g=1 lse_base=2 positions=1 dq_type=bf16 dkv_type=f32; "
      "the manifest has no kernel of kind 'dkv_cast' (kinds present: "
      "none)");
}

/// `match` (no strings, the per-call path) picks what `select` picks, and
/// nothing where `select` throws, over every combination of field values
/// the manifest has, lacks, or leaves open.
TEST(KernelSelection, MatchAgreesWithSelect) {
  KernelJson folded = bwd("pairs_h32", foldedConfig(32, 2));
  KernelJson cast;
  cast.name = "cast_dq32";
  cast.kind = "\"dkv_cast\"";
  cast.config = R"({"dq_type": "f32", "tokens": 2})";
  KernelJson delta;
  delta.name = "delta_d512";
  delta.kind = "\"delta\"";
  delta.config = R"({"d": 512})";
  Manifest manifest = Manifest::parse(manifestText(
      {bwd("pos_lse2", bwdConfig(512, 64, 16, 1, "2", true)),
       bwd("nopos_lse2_b32",
           bwdConfig(512, 64, 16, 1, "2", false, "bf16", "f32", 32)),
       bwd("pos_lsee_h32", bwdConfig(512, 64, 32, 1, "\"e\"", true)),
       bwd("pos_lse2_dq32", bwdConfig(512, 64, 16, 1, "2", true, "f32", "f32")),
       folded, cast, delta}));
  int matched = 0, refused = 0;
  for (const char *kind : {"bwd", "delta", "dkv_cast"})
    for (int64_t d : {512, 576})
      for (int64_t heads : {16, 32})
        for (LseBase base : {LseBase::Two, LseBase::E})
          for (bool positions : {false, true})
            for (std::optional<int64_t> block :
                 {std::optional<int64_t>(), std::optional<int64_t>(32),
                  std::optional<int64_t>(64)})
              for (int64_t tokens : {1, 2})
                for (const char *dq : {"bf16", "f32"}) {
                  KernelRequest request;
                  request.kind = kind;
                  request.d = d;
                  request.heads = heads;
                  request.lseBase = base;
                  request.positions = positions;
                  request.block = block;
                  request.tokens = tokens;
                  request.dqType = dq;
                  const KernelEntry *fast = manifest.match(request);
                  const KernelEntry *slow = nullptr;
                  try {
                    slow = &manifest.select(request);
                  } catch (const Error &) {
                  }
                  EXPECT_EQ(fast, slow) << request.str();
                  ++(slow ? matched : refused);
                }
  EXPECT_GT(matched, 20);
  EXPECT_GT(refused, 20);
}

TEST(KernelSelection, VerifyCubinNamesKernelAndBothDigests) {
  Manifest manifest = Manifest::parse(manifestText({KernelJson()}));
  const KernelEntry &kernel = manifest.kernels[0];
  EXPECT_NO_THROW(verifyCubin(kernel, fakeCubin(kernel.name)));
  std::string other = "not the cubin";
  EXPECT_EQ(SMLA_ERROR_MESSAGE(verifyCubin(kernel, other)),
            "smla: cubin 'smla_bwd_d512_dt64_h16_g1_lse2_pos.cubin' of " +
                kernel.describe() + " has sha256 " + sha256Hex(other) +
                ", but the manifest expects " +
                sha256Hex(fakeCubin(kernel.name)) +
                "; the cubin and the manifest come from different builds");
}

} // namespace

namespace {

TEST(KernelSelection, DeviceMismatchNamesTargetAndDevice) {
  // An "a" target runs on exactly its own compute capability; any other on
  // the same major version with a minor one at least its own.
  const std::string only90 =
      "the kernel library targets sm_90a, which runs only on devices of "
      "compute capability 9.0 (H100, H200); the device has compute "
      "capability ";
  struct Case {
    const char *target;
    int major, minor;
    std::string why; // "" where it runs
  };
  const Case cases[] = {
      {"sm_90a", 9, 0, ""},
      {"sm_90a", 8, 0, only90 + "8.0 (sm_80)"},
      {"sm_90a", 9, 1, only90 + "9.1 (sm_91)"},
      {"sm_90a", 10, 0, only90 + "10.0 (sm_100)"},
      {"sm_86", 8, 9, ""},
      {"sm_86", 8, 0,
       "the kernel library targets sm_86, which runs only on compute "
       "capability 8.6 up to 8.9; the device has compute capability 8.0 "
       "(sm_80)"},
      {"sm_100a", 10, 0, ""},
  };
  for (const Case &c : cases) {
    Manifest manifest;
    manifest.target = c.target;
    EXPECT_EQ(manifest.deviceMismatch(c.major, c.minor), c.why)
        << c.target << " on " << c.major << "." << c.minor;
  }
  // A run of digits too long for an int (found by the fuzz target) too.
  for (const char *bad : {"compute_90", "sm_9", "sm_90ab", "sm_", "sm_1000",
                          "sm_33333333333333333333a"}) {
    Manifest manifest;
    manifest.target = bad;
    EXPECT_EQ(manifest.deviceMismatch(9, 0),
              std::string("the kernel library's target '") + bad +
                  "' is not an sm_XY architecture; the device has compute "
                  "capability 9.0 (sm_90)");
  }
}

} // namespace
