//===- GridExprTest.cpp - Tests for launch-grid rules ---------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Error.h"
#include "smla/runtime/Launcher.h"
#include "smla/runtime/Manifest.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

using namespace smla::runtime;
using namespace smla::runtime::test;

namespace {

GridExpr parsed(const std::string &text) {
  std::string error;
  std::optional<GridExpr> expr = GridExpr::parse(text, error);
  EXPECT_TRUE(expr.has_value()) << text << ": " << error;
  return expr.value_or(GridExpr::constant(-1));
}

std::string parseError(const std::string &text) {
  std::string error;
  EXPECT_FALSE(GridExpr::parse(text, error).has_value()) << text;
  return error;
}

TEST(GridExpr, EvaluatesEveryForm) {
  GridSizes sizes{/*T=*/1000, /*S_kv=*/4096, /*K=*/2048, /*H=*/16, /*G=*/2};
  EXPECT_EQ(parsed("7").evaluate(sizes), 7);
  EXPECT_EQ(parsed("T").evaluate(sizes), 1000);
  EXPECT_EQ(parsed("S_kv").evaluate(sizes), 4096);
  EXPECT_EQ(parsed("K").evaluate(sizes), 2048);
  EXPECT_EQ(parsed("H").evaluate(sizes), 16);
  EXPECT_EQ(parsed("G").evaluate(sizes), 2);
  EXPECT_EQ(parsed("ceil_div(T, 1)").evaluate(sizes), 1000);
  EXPECT_EQ(parsed("ceil_div(T, 64)").evaluate(sizes), 16); // 15.6 -> 16
  EXPECT_EQ(parsed("ceil_div(K,64)").evaluate(sizes), 32);  // exact
  EXPECT_EQ(parsed("  ceil_div ( S_kv , 3 )  ").evaluate(sizes), 1366);
  EXPECT_EQ(parsed("ceil_div(T, 64)").evaluate(GridSizes{}), 0);
  GridSizes huge{INT64_MAX, 0, 0, 0, 0};
  EXPECT_EQ(parsed("ceil_div(T, 2)").evaluate(huge), INT64_MAX / 2 + 1);
}

TEST(GridExpr, PrintsCanonicalForm) {
  EXPECT_EQ(parsed(" ceil_div(  H,4)").str(), "ceil_div(H, 4)");
  EXPECT_EQ(parsed(" S_kv ").str(), "S_kv");
  EXPECT_EQ(parsed("0012").str(), "12");
}

TEST(GridExpr, RejectsMalformedRules) {
  EXPECT_EQ(parseError(""), "empty expression");
  EXPECT_EQ(parseError("   "), "empty expression");
  EXPECT_EQ(parseError("t"),
            "expected a variable (T, S_kv, K, H or G), found 't'");
  EXPECT_EQ(parseError("0"),
            "a grid constant '0' is not an integer in [1, 2^63)");
  EXPECT_EQ(parseError("99999999999999999999"),
            "a grid constant '99999999999999999999' is not an integer in "
            "[1, 2^63)");
  EXPECT_EQ(parseError("T 1"), "unexpected '1' after the expression");
  EXPECT_EQ(parseError("ceil_div"), "expected '(', found the end");
  EXPECT_EQ(parseError("ceil_div(64, T)"),
            "expected a variable (T, S_kv, K, H or G), found '64'");
  EXPECT_EQ(parseError("ceil_div(T 64)"), "expected ',', found '64'");
  EXPECT_EQ(parseError("ceil_div(T, 0)"),
            "a divisor '0' is not an integer in [1, 2^63)");
  EXPECT_EQ(parseError("ceil_div(T, H)"), "expected a divisor, found 'H'");
  EXPECT_EQ(parseError("ceil_div(T, 4"), "expected ')', found the end");
  EXPECT_EQ(parseError("ceil_div(T, 4))"),
            "unexpected ')' after the expression");
  EXPECT_EQ(parseError("T-1"), "unexpected character '-'");
  EXPECT_EQ(parseError("64x"), "malformed token '64x'");
  EXPECT_EQ(parseError("floor_div(T, 2)"),
            "expected a variable (T, S_kv, K, H or G), found 'floor_div'");
}

TEST(GridExpr, NegativeSizeIsAnError) {
  GridSizes sizes;
  sizes.G = -1;
  EXPECT_EQ(
      SMLA_ERROR_MESSAGE(parsed("ceil_div(G, 2)").evaluate(sizes)),
      "smla: grid rule 'ceil_div(G, 2)' read G=-1, but sizes must be >= 0");
}

TEST(LaunchGeometry, EvaluatesTheManifestRules) {
  Manifest manifest = Manifest::parse(manifestText({KernelJson()}));
  const KernelEntry &kernel = manifest.kernels[0];
  LaunchGeometry g = launchGeometry(kernel, GridSizes{300, 9000, 2048, 16, 1});
  EXPECT_EQ(g.grid, (std::array<unsigned, 3>{300, 1, 1}));
  EXPECT_EQ(g.block, (std::array<unsigned, 3>{128, 1, 1}));
  EXPECT_EQ(g.dynamicSmem, 98304u);
  EXPECT_FALSE(g.empty());
  EXPECT_TRUE(launchGeometry(kernel, GridSizes{0, 9000, 2048, 16, 1}).empty());
}

TEST(LaunchGeometry, LimitsAndNegativeSizesNameTheKernel) {
  Manifest manifest = Manifest::parse(manifestText({KernelJson()}));
  const KernelEntry &kernel = manifest.kernels[0];
  EXPECT_EQ(SMLA_ERROR_MESSAGE(
                launchGeometry(kernel, GridSizes{10, 10, 10, 16, 70000})),
            "smla: cannot launch " + kernel.describe() +
                ": grid.y = G = 70000 exceeds the limit 65535");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(launchGeometry(
                kernel, GridSizes{int64_t(1) << 31, 1, 1, 1, 1})),
            "smla: cannot launch " + kernel.describe() +
                ": grid.x = ceil_div(T, 1) = 2147483648 exceeds the limit "
                "2147483647");
  EXPECT_EQ(
      SMLA_ERROR_MESSAGE(launchGeometry(kernel, GridSizes{-5, 1, 1, 1, 1})),
      "smla: cannot launch " + kernel.describe() +
          ": grid rule 'ceil_div(T, 1)' read T=-5, but sizes must be >= 0");
}

} // namespace
