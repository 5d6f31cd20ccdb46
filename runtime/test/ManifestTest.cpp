//===- ManifestTest.cpp - Tests for manifest parsing and validation -------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Manifest.h"
#include "smla/runtime/Error.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

using namespace smla::runtime;
using namespace smla::runtime::test;

namespace {

const char *const kName = "smla_bwd_d512_dt64_h16_g1_lse2_pos";

std::string replaced(std::string text, const std::string &from,
                     const std::string &to) {
  size_t pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << "'" << from << "' not in manifest";
  if (pos != std::string::npos)
    text.replace(pos, from.size(), to);
  return text;
}

/// The error for the default manifest with `field` of its kernel set to
/// `value`; `at` is the text whose position the error must report.
std::string errorWith(std::string KernelJson::*field, const std::string &value,
                      const std::string &at, std::string *text = nullptr) {
  KernelJson kernel;
  kernel.*field = value;
  std::string manifest = manifestText({kernel});
  std::string message = SMLA_ERROR_MESSAGE(Manifest::parse(manifest));
  std::string prefix = "smla: manifest error at " + locationOf(manifest, at) +
                       ": kernel '" + kName + "': ";
  EXPECT_EQ(message.rfind(prefix, 0), 0u)
      << "message: " << message << "\nexpected prefix: " << prefix;
  if (text)
    *text = manifest;
  return message.substr(std::min(prefix.size(), message.size()));
}

TEST(Manifest, ParsesAValidManifest) {
  KernelJson bwd;
  bwd.sha256 = "\"" + std::string(64, 'A') + "\"";
  KernelJson delta;
  delta.name = "smla_delta_d512_h16";
  delta.kind = "\"delta\"";
  delta.entry = "\"smla_delta_kernel\"";
  delta.config =
      R"({"d": 512, "heads": 16, "note": "unknown keys are ignored"})";
  delta.launch = R"({"block": [256, 1, 1], "grid": [" ceil_div( T , 8 ) ", )"
                 R"(2, "H"], "dynamic_smem": 0, "cluster": [1, 1, 1]})";
  delta.params = R"([{"name": "o", "type": "ptr", "doc": "x"}, )"
                 R"({"name": "n", "type": "i64"}])";
  std::string text = manifestText({bwd, delta});
  text =
      replaced(text, "\"target\"", "\"compiler\": {\"v\": 1},\n  \"target\"");
  Manifest manifest = Manifest::parse(text);

  EXPECT_EQ(manifest.version, 1);
  EXPECT_EQ(manifest.target, "sm_90a");
  ASSERT_EQ(manifest.kernels.size(), 2u);
  const KernelEntry &k = manifest.kernels[0];
  EXPECT_EQ(k.name, kName);
  EXPECT_EQ(k.kind, "bwd");
  EXPECT_EQ(k.cubin, std::string(kName) + ".cubin");
  EXPECT_EQ(k.sha256, std::string(64, 'a')); // normalized to lowercase
  EXPECT_EQ(k.entry, "smla_bwd_kernel");
  EXPECT_EQ(k.config.str(), "d=512 dt=64 h=16 g=1 lse_base=2 positions=1 "
                            "block=64 dq_type=bf16 dkv_type=f32");
  EXPECT_EQ(k.describe(),
            std::string("kernel '") + kName + "' (" + k.config.str() + ")");
  EXPECT_EQ(k.launch.block, (std::array<unsigned, 3>{128, 1, 1}));
  EXPECT_EQ(k.launch.grid[0].str(), "ceil_div(T, 1)");
  EXPECT_EQ(k.launch.grid[1].str(), "G");
  EXPECT_EQ(k.launch.grid[2].str(), "1");
  EXPECT_EQ(k.launch.dynamicSmem, 98304u);
  ASSERT_EQ(k.params.size(), 3u);
  EXPECT_EQ(k.params[0].name, "q");
  EXPECT_EQ(k.params[0].type, ParamType::Ptr);
  EXPECT_EQ(k.params[1].type, ParamType::I32);
  EXPECT_EQ(k.params[2].name, "sm_scale");
  EXPECT_EQ(k.params[2].type, ParamType::F32);

  const KernelEntry &d = manifest.kernels[1];
  EXPECT_EQ(d.kind, "delta");
  EXPECT_EQ(d.config.str(), "d=512 h=16"); // the rest is a wildcard
  EXPECT_FALSE(d.config.positions.has_value());
  EXPECT_EQ(d.launch.grid[0].str(), "ceil_div(T, 8)");
  EXPECT_EQ(d.launch.grid[1].str(), "2");
  EXPECT_EQ(d.launch.grid[2].str(), "H");
  EXPECT_EQ(d.params[1].type, ParamType::I64);
  EXPECT_EQ(manifest.find("smla_delta_d512_h16"), &d);
  EXPECT_EQ(manifest.find("nope"), nullptr);
}

TEST(Manifest, AcceptsNaturalLogLse) {
  KernelJson kernel;
  kernel.config = bwdConfig(512, 64, 16, 1, "\"e\"", false);
  Manifest manifest = Manifest::parse(manifestText({kernel}));
  EXPECT_EQ(manifest.kernels[0].config.lseBase, LseBase::E);
  EXPECT_EQ(manifest.kernels[0].config.str(),
            "d=512 dt=64 h=16 g=1 lse_base=e positions=0 block=64 "
            "dq_type=bf16 dkv_type=f32");
}

TEST(Manifest, AcceptsKernelsWithoutARopeTail) {
  // dt = 0: one kv row of width d is both K and V (DeepSeek-V4).
  KernelJson kernel;
  kernel.config = bwdConfig(512, 0, 64, 1, "2", false);
  Manifest manifest = Manifest::parse(manifestText({kernel}));
  EXPECT_EQ(manifest.kernels[0].config.dt, 0);
}

TEST(Manifest, AcceptsAnEmptyKernelList) {
  EXPECT_TRUE(Manifest::parse(manifestText({})).kernels.empty());
}

TEST(Manifest, MissingKernelKeysAreNamed) {
  for (const char *key :
       {"kind", "cubin", "sha256", "entry", "config", "launch", "params"}) {
    std::string text = manifestText({KernelJson()});
    size_t begin = text.find(std::string("      \"") + key + "\"");
    text.erase(begin, text.find('\n', begin) + 1 - begin);
    if (std::string(key) == "params") // keep the JSON valid: drop the comma
      text = replaced(text, "98304},\n    }", "98304}\n    }");
    EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse(text)),
              "smla: manifest error at " + locationOf(text, "{\n      \"name") +
                  ": kernel '" + kName + "': missing required key '" + key +
                  "'");
  }
}

TEST(Manifest, MissingNameIsReportedByIndex) {
  KernelJson second;
  second.name = "second";
  std::string text = manifestText({KernelJson(), second});
  text = replaced(text, "      \"name\": \"second\",\n", "");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse(text)),
            "smla: manifest error at " + locationOf(text, "{\n      \"kind") +
                ": kernel #1: missing required key 'name'");
}

TEST(Manifest, MissingConfigAndLaunchKeysAreNamedWithTheirPath) {
  std::string config = bwdConfig(512, 64, 16, 1, "2", true);
  for (const char *key :
       {"\"d\": 512, ", "\"groups\": 1, ", "\"lse_base\": 2, ",
        "\"positions\": true, ", "\"dq_type\": \"bf16\", "}) {
    std::string shortened = replaced(config, key, "");
    std::string name =
        std::string(key).substr(1, std::string(key).find('"', 1) - 1);
    EXPECT_EQ(errorWith(&KernelJson::config, shortened, "{\"d"),
              "missing required key 'config." + name + "'");
  }
  EXPECT_EQ(errorWith(&KernelJson::launch,
                      R"({"block": [1, 1, 1], "grid": [1, 1, 1]})", "{\"block"),
            "missing required key 'launch.dynamic_smem'");
  EXPECT_EQ(errorWith(&KernelJson::params, R"([{"type": "ptr"}])", "{\"type"),
            "missing required key 'params[0].name'");
}

TEST(Manifest, WrongTypesAreNamed) {
  EXPECT_EQ(errorWith(&KernelJson::kind, "3", "3,"),
            "key 'kind': expected a string, got a number");
  EXPECT_EQ(errorWith(&KernelJson::entry, "\"\"", "\"\","),
            "key 'entry': expected a non-empty string");
  EXPECT_EQ(errorWith(&KernelJson::config, "[]", "[],"),
            "key 'config': expected an object, got an array");
  EXPECT_EQ(errorWith(&KernelJson::config,
                      replaced(bwdConfig(512, 64, 16, 1, "2", true), "512",
                               "\"512\""),
                      "\"512\""),
            "key 'config.d': expected a number, got a string");
  EXPECT_EQ(
      errorWith(&KernelJson::config,
                replaced(bwdConfig(512, 64, 16, 1, "2", true), "64,", "64.5,"),
                "64.5"),
      "key 'config.dt': expected an integer in [0, 2147483647]");
  EXPECT_EQ(
      errorWith(&KernelJson::config,
                replaced(bwdConfig(512, 64, 16, 1, "2", true), "64,", "-1,"),
                "-1,"),
      "key 'config.dt': expected an integer in [0, 2147483647]");
  EXPECT_EQ(
      errorWith(&KernelJson::config,
                replaced(bwdConfig(512, 64, 16, 1, "2", true), "16,", "0,"),
                "0,"),
      "key 'config.heads': expected an integer in [1, 2147483647]");
  EXPECT_EQ(errorWith(&KernelJson::config,
                      bwdConfig(512, 64, 16, 1, "10", true), "10,"),
            "key 'config.lse_base': expected 2 (base-2 lse) or \"e\" "
            "(natural-log lse)");
  EXPECT_EQ(
      errorWith(&KernelJson::config,
                replaced(bwdConfig(512, 64, 16, 1, "2", true), "true", "1"),
                "1, \"dq"),
      "key 'config.positions': expected a boolean, got a number");
  EXPECT_EQ(errorWith(&KernelJson::sha256, "\"abc\"", "\"abc\""),
            "key 'sha256': expected 64 hex digits");
  EXPECT_EQ(errorWith(&KernelJson::sha256, "\"" + std::string(63, 'a') + "g\"",
                      "\"aaa"),
            "key 'sha256': expected 64 hex digits");
  const std::string notAName = "key 'cubin': expected a file name in the "
                               "manifest's directory (no '/', no NUL byte, "
                               "not '.' or '..'), got '";
  EXPECT_EQ(errorWith(&KernelJson::cubin, "\"/abs/x.cubin\"", "\"/abs"),
            notAName + "/abs/x.cubin'");
  EXPECT_EQ(errorWith(&KernelJson::cubin, "\"a/../../x.cubin\"", "\"a/"),
            notAName + "a/../../x.cubin'");
  EXPECT_EQ(errorWith(&KernelJson::cubin, "\"sub/x.cubin\"", "\"sub/"),
            notAName + "sub/x.cubin'");
  EXPECT_EQ(errorWith(&KernelJson::cubin, "\"..\"", "\"..\""),
            notAName + "..'");
  // A NUL byte would cut the name short where the file is opened.
  EXPECT_EQ(errorWith(&KernelJson::cubin, "\"x.cubin\\u0000.txt\"", "\"x.cu"),
            notAName + "x.cubin\\x00.txt'");
  EXPECT_EQ(errorWith(&KernelJson::params, "{}", "{}\n"),
            "key 'params': expected an array, got an object");
  EXPECT_EQ(
      errorWith(&KernelJson::params, R"([{"name": "q", "type": 8}])", "8}]"),
      "key 'params[0].type': expected a string, got a number");
}

TEST(Manifest, BadLaunchGeometryIsNamed) {
  auto launch = [](const std::string &block, const std::string &grid,
                   const std::string &smem = "0") {
    return "{\"block\": " + block + ", \"grid\": " + grid +
           ", \"dynamic_smem\": " + smem + "}";
  };
  EXPECT_EQ(errorWith(&KernelJson::launch, launch("[128, 1]", "[1, 1, 1]"),
                      "[128, 1]"),
            "key 'launch.block': expected 3 entries");
  EXPECT_EQ(errorWith(&KernelJson::launch, launch("[2048, 1, 1]", "[1, 1, 1]"),
                      "2048, 1"),
            "key 'launch.block[0]': expected an integer in [1, 1024]");
  EXPECT_EQ(errorWith(&KernelJson::launch, launch("[64, 32, 1]", "[1, 1, 1]"),
                      "[64, 32"),
            "key 'launch.block': a block of 2048 threads exceeds the limit of "
            "1024");
  EXPECT_EQ(errorWith(&KernelJson::launch,
                      launch("[1, 1, 1]", "[1, 1, 1]", "-1"), "-1"),
            "key 'launch.dynamic_smem': expected an integer in [0, "
            "2147483647]");
  EXPECT_EQ(errorWith(&KernelJson::launch, launch("[1, 1, 1]", "[1, 1]"),
                      "[1, 1], \"dyn"),
            "key 'launch.grid': expected 3 entries");
  EXPECT_EQ(errorWith(&KernelJson::launch, launch("[1, 1, 1]", "[1, 0, 1]"),
                      "0, 1], \"dyn"),
            "key 'launch.grid[1]': expected an integer in [1, "
            "9223372036854775807]");
  EXPECT_EQ(errorWith(&KernelJson::launch, launch("[1, 1, 1]", "[1, 1, true]"),
                      "true]"),
            "key 'launch.grid[2]': expected an integer or a string, got a "
            "boolean");
  EXPECT_EQ(
      errorWith(&KernelJson::launch,
                launch("[1, 1, 1]", "[\"ceil_div(T)\", 1, 1]"),
                "\"ceil_div(T)"),
      "key 'launch.grid[0]': bad grid expression 'ceil_div(T)': expected ',', "
      "found ')'");
  EXPECT_EQ(errorWith(&KernelJson::launch, launch("[1, 1, 1]", "[1, \"Q\", 1]"),
                      "\"Q\""),
            "key 'launch.grid[1]': bad grid expression 'Q': expected a "
            "variable (T, S_kv, K, H or G), found 'Q'");
  EXPECT_EQ(errorWith(&KernelJson::launch,
                      launch("[1, 1, 1]", "[1, 1, \"T*2\"]"), "\"T*2\""),
            "key 'launch.grid[2]': bad grid expression 'T*2': unexpected "
            "character '*'");
}

TEST(Manifest, BadParamsAreNamed) {
  EXPECT_EQ(
      errorWith(
          &KernelJson::params,
          R"([{"name": "q", "type": "ptr"}, {"name": "T", "type": "u8"}])",
          "\"u8\""),
      "key 'params[1].type': unknown parameter type 'u8' (expected ptr, "
      "i32, i64 or f32)");
  std::string text;
  std::string message = errorWith(
      &KernelJson::params,
      R"([{"name": "q", "type": "ptr"}, {"name": "q", "type": "i32"}])",
      "\"q\", \"type\": \"i32", &text);
  EXPECT_EQ(message, "key 'params[1].name': duplicate parameter name 'q' "
                     "(first at " +
                         locationOf(text, "\"q\"") + ")");
  EXPECT_EQ(errorWith(&KernelJson::params, R"([7])", "7]"),
            "key 'params[0]': expected an object, got a number");
}

TEST(Manifest, DuplicateKernelNameIsAnError) {
  std::string text = manifestText({KernelJson(), KernelJson()});
  EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse(text)),
            "smla: manifest error at " +
                locationOf(text, "\"" + std::string(kName) + "\"", 1) +
                ": kernel '" + kName +
                "': key 'name': duplicate kernel name (first defined at " +
                locationOf(text, "{\n      \"name") + ")");
}

TEST(Manifest, TopLevelErrors) {
  std::string text = manifestText({KernelJson()});
  EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse(manifestText({}, "2"))),
            "smla: manifest error at 3:14: key 'version': unsupported manifest "
            "version 2 (this runtime reads version 1)");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse(manifestText({}, "1.5"))),
            "smla: manifest error at 3:14: key 'version': unsupported manifest "
            "version (not an integer) (this runtime reads version 1)");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse(manifestText({}, "\"1\""))),
            "smla: manifest error at 3:14: key 'version': expected a number, "
            "got a string");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse(
                replaced(text, "\"smla-manifest\"", "\"other\""))),
            "smla: manifest error at 2:13: key 'format': expected "
            "\"smla-manifest\", got \"other\"");
  for (const char *key : {"format", "version", "target", "kernels"}) {
    std::string line = "  \"" + std::string(key) + "\"";
    std::string cut = text;
    size_t begin = cut.find(line);
    size_t end = std::string(key) == "kernels" ? cut.rfind("]") + 1
                                               : cut.find('\n', begin) + 1;
    cut.erase(begin, end - begin);
    if (std::string(key) == "kernels")
      cut = replaced(cut, "\"sm_90a\",", "\"sm_90a\"");
    EXPECT_EQ(
        SMLA_ERROR_MESSAGE(Manifest::parse(cut)),
        std::string("smla: manifest error at 1:1: missing required key '") +
            key + "'");
  }
  EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse("[]")),
            "smla: manifest error at 1:1: expected an object, got an array");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse(
                replaced(text, "\"kernels\": [", "\"kernels\": [\"x\", "))),
            "smla: manifest error at 5:15: kernel #0: expected an object, got "
            "a string");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(Manifest::parse("{\"format\": }")),
            "smla: JSON parse error at 1:12: unexpected character '}', "
            "expected a value");
}

} // namespace

namespace {

TEST(Manifest, ReadsTheOptionalProvenance) {
  KernelJson kernel;
  EXPECT_EQ(Manifest::parse(manifestText({kernel})).kernels[0].compiler, "");
  kernel.params += ",\n      \"compiler\": \"smla-compile 0f400e9\",\n"
                   "      \"spec\": \"d=512,dt=64,threads=256\"";
  const KernelEntry k = Manifest::parse(manifestText({kernel})).kernels[0];
  EXPECT_EQ(k.compiler, "smla-compile 0f400e9");
  EXPECT_EQ(k.spec, "d=512,dt=64,threads=256");
  KernelJson wrong;
  wrong.params += ",\n      \"spec\": 3";
  EXPECT_NE(SMLA_ERROR_MESSAGE(Manifest::parse(manifestText({wrong})))
                .find("key 'spec': expected a string, got a number"),
            std::string::npos);
}

} // namespace
