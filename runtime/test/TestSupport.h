//===- TestSupport.h - Manifest builders for the runtime tests --*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Builds manifest text the way the compiler writes it (one key per line), so
// tests can mutate one key and check the exact error, line:column included.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_RUNTIME_TEST_TESTSUPPORT_H
#define SMLA_RUNTIME_TEST_TESTSUPPORT_H

#include "smla/runtime/Error.h"
#include "smla/runtime/Sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace smla::runtime::test {

/// The cubin bytes the tests use for a kernel (not a real image).
inline std::string fakeCubin(const std::string &name) {
  return "FAKE-CUBIN:" + name;
}

/// One kernel entry; every field is JSON text.
struct KernelJson {
  std::string name = "smla_bwd_d512_dt64_h16_g1_lse2_pos";
  std::string kind = "\"bwd\"";
  std::string cubin;  // default: "<name>.cubin"
  std::string sha256; // default: the digest of fakeCubin(name)
  std::string entry = "\"smla_bwd_kernel\"";
  std::string config =
      R"({"d": 512, "dt": 64, "heads": 16, "groups": 1, "block": 64, )"
      R"("lse_base": 2, "positions": true, "dq_type": "bf16", )"
      R"("dkv_type": "f32"})";
  std::string launch = R"({"block": [128, 1, 1], )"
                       R"j("grid": ["ceil_div(T, 1)", "G", "1"], )j"
                       R"("dynamic_smem": 98304})";
  std::string params = R"([{"name": "q", "type": "ptr"}, )"
                       R"({"name": "T", "type": "i32"}, )"
                       R"({"name": "sm_scale", "type": "f32"}])";

  std::string str() const {
    std::string out = "    {\n";
    out += "      \"name\": \"" + name + "\",\n";
    out += "      \"kind\": " + kind + ",\n";
    out += "      \"cubin\": " +
           (cubin.empty() ? "\"" + name + ".cubin\"" : cubin) + ",\n";
    out +=
        "      \"sha256\": " +
        (sha256.empty() ? "\"" + sha256Hex(fakeCubin(name)) + "\"" : sha256) +
        ",\n";
    out += "      \"entry\": " + entry + ",\n";
    out += "      \"config\": " + config + ",\n";
    out += "      \"launch\": " + launch + ",\n";
    out += "      \"params\": " + params + "\n";
    return out + "    }";
  }
};

/// A bwd config object with the given fields.
inline std::string bwdConfig(int d, int dt, int heads, int groups,
                             const std::string &lse, bool positions,
                             const std::string &dq = "bf16",
                             const std::string &dkv = "f32", int block = 64) {
  return "{\"d\": " + std::to_string(d) + ", \"dt\": " + std::to_string(dt) +
         ", \"heads\": " + std::to_string(heads) +
         ", \"groups\": " + std::to_string(groups) +
         ", \"block\": " + std::to_string(block) + ", \"lse_base\": " + lse +
         ", \"positions\": " + (positions ? "true" : "false") +
         ", \"dq_type\": \"" + dq + "\", \"dkv_type\": \"" + dkv + "\"}";
}

inline std::string manifestText(const std::vector<KernelJson> &kernels,
                                const std::string &version = "1") {
  std::string out =
      "{\n  \"format\": \"smla-manifest\",\n  \"version\": " + version +
      ",\n  \"target\": \"sm_90a\",\n  \"kernels\": [\n";
  for (size_t i = 0; i < kernels.size(); ++i)
    out += kernels[i].str() + (i + 1 < kernels.size() ? ",\n" : "\n");
  return out + "  ]\n}\n";
}

/// "line:column" (1-based) of the `occurrence`-th match of `needle`.
inline std::string locationOf(std::string_view text, std::string_view needle,
                              int occurrence = 0) {
  size_t pos = text.find(needle);
  for (int i = 0; i < occurrence && pos != std::string_view::npos; ++i)
    pos = text.find(needle, pos + 1);
  EXPECT_NE(pos, std::string_view::npos) << "'" << needle << "' not in text";
  if (pos == std::string_view::npos)
    return "?";
  int line = 1, column = 1;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

/// The message of the Error `statement` throws; fails the test if none.
#define SMLA_ERROR_MESSAGE(statement)                                          \
  [&]() -> std::string {                                                       \
    try {                                                                      \
      statement;                                                               \
    } catch (const ::smla::runtime::Error &error) {                            \
      return error.what();                                                     \
    }                                                                          \
    ADD_FAILURE() << "expected smla::runtime::Error from " #statement;         \
    return "";                                                                 \
  }()

} // namespace smla::runtime::test

#endif // SMLA_RUNTIME_TEST_TESTSUPPORT_H
