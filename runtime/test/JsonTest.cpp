//===- JsonTest.cpp - Tests for the JSON reader ---------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Json.h"
#include "smla/runtime/Error.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <chrono>

using namespace smla::runtime;
using json::Value;

namespace {

TEST(Json, ParsesScalars) {
  EXPECT_TRUE(json::parse("null").isNull());
  EXPECT_TRUE(json::parse(" true ").asBool());
  EXPECT_FALSE(json::parse("false").asBool());
  EXPECT_EQ(json::parse("\"hi\"").asString(), "hi");
  EXPECT_EQ(json::parse("0").asInteger(), 0);
  EXPECT_EQ(json::parse("-42").asInteger(), -42);
  EXPECT_EQ(json::parse("9223372036854775807").asInteger(),
            INT64_C(9223372036854775807));
  EXPECT_DOUBLE_EQ(json::parse("1.5e3").asNumber(), 1500.0);
  EXPECT_DOUBLE_EQ(json::parse("-0.25").asNumber(), -0.25);
  EXPECT_DOUBLE_EQ(json::parse("2E-2").asNumber(), 0.02);
}

TEST(Json, DistinguishesIntegersFromOtherNumbers) {
  EXPECT_TRUE(json::parse("64").isInteger());
  EXPECT_FALSE(json::parse("64.0").isInteger());
  EXPECT_FALSE(json::parse("1e2").isInteger());
  // Too large for int64: still a number, but not an integer.
  Value big = json::parse("18446744073709551616");
  EXPECT_TRUE(big.isNumber());
  EXPECT_FALSE(big.isInteger());
  EXPECT_DOUBLE_EQ(big.asNumber(), 18446744073709551616.0);
}

TEST(Json, DecodesEveryEscape) {
  Value v = json::parse(R"("a\"b\\c\/d\be\ff\ng\rh\ti\u0041\u00e9\u20ac")");
  EXPECT_EQ(v.asString(), "a\"b\\c/d\be\ff\ng\rh\tiA\xc3\xa9\xe2\x82\xac");
  // A surrogate pair encodes U+1F600 as four UTF-8 bytes.
  EXPECT_EQ(json::parse(R"("\ud83d\ude00")").asString(), "\xf0\x9f\x98\x80");
  // Raw UTF-8 passes through.
  EXPECT_EQ(json::parse("\"\xc3\xa9\"").asString(), "\xc3\xa9");
}

TEST(Json, ParsesNestedDocumentsInOrderWithLocations) {
  Value v = json::parse("{\n  \"b\": [1, {\"c\": null}],\n  \"a\": \"x\"\n}");
  ASSERT_TRUE(v.isObject());
  const json::Object &members = v.asObject();
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members[0].first, "b");
  EXPECT_EQ(members[1].first, "a");
  const Value *b = v.find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->asArray().size(), 2u);
  EXPECT_EQ(b->location().str(), "2:8");
  EXPECT_EQ(b->asArray()[1].location().str(), "2:12");
  EXPECT_TRUE(b->asArray()[1].find("c")->isNull());
  EXPECT_EQ(v.find("a")->location().str(), "3:8");
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_TRUE(json::parse("[]").asArray().empty());
  EXPECT_TRUE(json::parse("{ }").asObject().empty());
}

TEST(Json, AccessorOfTheWrongKindThrows) {
  Value v = json::parse("\n  [1]");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(v.asObject()),
            "smla: JSON value at 2:3 is array, expected object");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(json::parse("1.5").asInteger()),
            "smla: JSON number at 1:1 is not an integer");
}

struct ErrorCase {
  const char *text;
  int line, column;
  const char *what;
};

class JsonErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(JsonErrors, ReportLineAndColumn) {
  const ErrorCase &c = GetParam();
  try {
    json::parse(c.text);
    FAIL() << "no error for: " << c.text;
  } catch (const JsonError &error) {
    EXPECT_EQ(error.line(), c.line) << c.text;
    EXPECT_EQ(error.column(), c.column) << c.text;
    EXPECT_EQ(std::string(error.what()),
              "smla: JSON parse error at " + std::to_string(c.line) + ":" +
                  std::to_string(c.column) + ": " + c.what);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Json, JsonErrors,
    ::testing::Values(
        ErrorCase{"", 1, 1, "unexpected end of input, expected a value"},
        ErrorCase{"  \n ", 2, 2, "unexpected end of input, expected a value"},
        ErrorCase{"@", 1, 1, "unexpected character '@', expected a value"},
        ErrorCase{"[1,]", 1, 4, "unexpected character ']', expected a value"},
        ErrorCase{"{\"a\":1,}", 1, 8,
                  "unexpected character '}', expected a string key"},
        ErrorCase{"{\n  a: 1}", 2, 3,
                  "unexpected character 'a', expected a string key"},
        ErrorCase{"{\"a\" 1}", 1, 6, "expected ':' after the object key 'a'"},
        ErrorCase{"{\"a\": 1 \"b\": 2}", 1, 9,
                  "unexpected character '\"', expected ',' or '}'"},
        ErrorCase{"[1 2]", 1, 4,
                  "unexpected character '2', expected ',' or ']'"},
        ErrorCase{"[1", 1, 3, "unexpected end of input, expected ',' or ']'"},
        ErrorCase{"{\"a\": 1", 1, 8,
                  "unexpected end of input, expected ',' or '}'"},
        ErrorCase{"{", 1, 2, "unexpected end of input, expected a string key"},
        ErrorCase{"{\"k\": 1,\n \"k\": 2}", 2, 2, "duplicate key 'k'"},
        ErrorCase{"tru", 1, 1, "invalid literal, expected 'true'"},
        ErrorCase{"[nul]", 1, 2, "invalid literal, expected 'null'"},
        ErrorCase{"falsy", 1, 1, "invalid literal, expected 'false'"},
        ErrorCase{"1 2", 1, 3,
                  "unexpected character '2' after the JSON document"},
        ErrorCase{"{} x", 1, 4,
                  "unexpected character 'x' after the JSON document"},
        ErrorCase{"\"abc", 1, 1, "unterminated string"},
        ErrorCase{"[\"a\\", 1, 2, "unterminated string"},
        ErrorCase{"\"a\nb\"", 1, 3, "unescaped control byte 0x0a in a string"},
        ErrorCase{"\"\\x\"", 1, 2, "invalid escape sequence '\\x'"},
        ErrorCase{"\"\\u12G4\"", 1, 6,
                  "invalid \\u escape: character 'G' is not a hex digit"},
        ErrorCase{"\"\\u12", 1, 6, "unexpected end of input in a \\u escape"},
        ErrorCase{"\"\\ud800\"", 1, 2,
                  "unpaired high surrogate in a \\u escape"},
        ErrorCase{"\"\\ud800\\u0041\"", 1, 2,
                  "unpaired high surrogate in a \\u escape"},
        ErrorCase{"\"x\\udc00\"", 1, 3,
                  "unpaired low surrogate in a \\u escape"},
        ErrorCase{"01", 1, 2, "invalid number: leading zeros are not allowed"},
        ErrorCase{"-", 1, 2, "invalid number: expected a digit after '-'"},
        ErrorCase{"-a", 1, 2, "invalid number: expected a digit after '-'"},
        ErrorCase{"1.", 1, 3, "invalid number: expected a digit after '.'"},
        ErrorCase{"1.e5", 1, 3, "invalid number: expected a digit after '.'"},
        ErrorCase{"1e", 1, 3,
                  "invalid number: expected a digit in the exponent"},
        ErrorCase{"1e+", 1, 4,
                  "invalid number: expected a digit in the exponent"},
        ErrorCase{"+1", 1, 1, "unexpected character '+', expected a value"},
        ErrorCase{".5", 1, 1, "unexpected character '.', expected a value"},
        ErrorCase{"1e999", 1, 1, "number out of range"},
        ErrorCase{"[\x01]", 1, 2, "unexpected byte 0x01, expected a value"}));

TEST(Json, RejectsExcessiveNesting) {
  std::string deep(300, '[');
  try {
    json::parse(deep);
    FAIL() << "no error";
  } catch (const JsonError &error) {
    EXPECT_EQ(error.column(), 257);
    EXPECT_EQ(
        std::string(error.what()),
        "smla: JSON parse error at 1:257: nesting deeper than 256 levels");
  }
  // 256 levels are fine.
  std::string ok = std::string(256, '[') + std::string(256, ']');
  EXPECT_TRUE(json::parse(ok).isArray());
}

} // namespace

namespace {

TEST(Json, DuplicateKeysAreFoundInLinearTime) {
  // 200k distinct keys: a pairwise check would take minutes (80k took 15 s).
  std::string text = "{";
  for (int i = 0; i < 200000; ++i)
    text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  auto start = std::chrono::steady_clock::now();
  Value v = json::parse(text + "}");
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  EXPECT_EQ(v.asObject().size(), 200000u);
  EXPECT_LT(seconds, 10.0);
  std::string message =
      SMLA_ERROR_MESSAGE(json::parse(text + ",\"k199999\":1}"));
  EXPECT_NE(message.find("duplicate key 'k199999'"), std::string::npos)
      << message;
}

TEST(Json, TheNumberOfValuesIsBounded) {
  // A short text of many values would take ~60x its size in memory.
  std::string text = "[";
  for (int i = 0; i < (1 << 20); ++i)
    text += "0,";
  EXPECT_NE(SMLA_ERROR_MESSAGE(json::parse(text + "0]"))
                .find("more than 1048576 values"),
            std::string::npos);
  // The array and 2^20 - 1 elements: exactly the limit.
  text.resize(text.size() - 4);
  EXPECT_EQ(json::parse(text + "0]").asArray().size(), (size_t(1) << 20) - 1);
}

} // namespace
