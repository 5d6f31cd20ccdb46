//===- Json.cpp - A small JSON reader for the kernel manifest -------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Json.h"

#include "smla/runtime/Error.h"

#include <charconv>
#include <cstdio>
#include <unordered_set>

namespace smla::runtime::json {

std::string Location::str() const {
  return std::to_string(line) + ":" + std::to_string(column);
}

const char *Value::kindName(Kind kind) {
  switch (kind) {
  case Kind::Null:
    return "null";
  case Kind::Bool:
    return "boolean";
  case Kind::Number:
    return "number";
  case Kind::String:
    return "string";
  case Kind::Array:
    return "array";
  case Kind::Object:
    return "object";
  }
  return "?";
}

static void expectKind(const Value &value, Value::Kind kind) {
  if (value.kind() != kind)
    throw Error("smla: JSON value at " + value.location().str() + " is " +
                Value::kindName(value.kind()) + ", expected " +
                Value::kindName(kind));
}

bool Value::asBool() const {
  expectKind(*this, Kind::Bool);
  return bool_;
}

double Value::asNumber() const {
  expectKind(*this, Kind::Number);
  return number_;
}

int64_t Value::asInteger() const {
  expectKind(*this, Kind::Number);
  if (!isInteger_)
    throw Error("smla: JSON number at " + location_.str() +
                " is not an integer");
  return integer_;
}

const std::string &Value::asString() const {
  expectKind(*this, Kind::String);
  return string_;
}

const Array &Value::asArray() const {
  expectKind(*this, Kind::Array);
  return array_;
}

const Object &Value::asObject() const {
  expectKind(*this, Kind::Object);
  return object_;
}

const Value *Value::find(std::string_view key) const {
  if (kind_ != Kind::Object)
    return nullptr;
  for (const Member &member : object_)
    if (member.first == key)
      return &member.second;
  return nullptr;
}

/// Recursive-descent parser over a byte string, tracking line and column.
class Parser {
public:
  explicit Parser(std::string_view text) : text_(text) {}

  Value parseDocument() {
    skipWhitespace();
    Value value = parseValue(0);
    skipWhitespace();
    if (!atEnd())
      fail("unexpected " + describe(peek()) + " after the JSON document");
    return value;
  }

private:
  // Deep enough for any manifest, shallow enough to never exhaust the stack.
  static constexpr int kMaxDepth = 256;
  // Bounds the memory a document can take (a Value is ~120 bytes, so a
  // short text such as "[0,0,0,...]" would otherwise grow ~60x): a kernel
  // library of a thousand kernels holds about 50k values.
  static constexpr size_t kMaxValues = size_t(1) << 20;
  size_t values_ = 0;

  std::string_view text_;
  size_t pos_ = 0;
  Location loc_;

  bool atEnd() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }

  void advance() {
    if (text_[pos_++] == '\n') {
      ++loc_.line;
      loc_.column = 1;
    } else {
      ++loc_.column;
    }
  }

  [[noreturn]] void failAt(Location at, const std::string &what) const {
    throw JsonError("smla: JSON parse error at " + at.str() + ": " + what,
                    at.line, at.column);
  }
  [[noreturn]] void fail(const std::string &what) const { failAt(loc_, what); }

  static std::string describe(char c) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f)
      return std::string("character '") + c + "'";
    char buffer[16];
    std::snprintf(buffer, sizeof(buffer), "byte 0x%02x", byte);
    return buffer;
  }

  void skipWhitespace() {
    while (!atEnd() && (peek() == ' ' || peek() == '\t' || peek() == '\n' ||
                        peek() == '\r'))
      advance();
  }

  void expectLiteral(std::string_view word) {
    Location start = loc_;
    for (char c : word) {
      if (atEnd() || peek() != c)
        failAt(start, "invalid literal, expected '" + std::string(word) + "'");
      advance();
    }
  }

  Value parseValue(int depth) {
    if (atEnd())
      fail("unexpected end of input, expected a value");
    if (++values_ > kMaxValues)
      fail("more than " + std::to_string(kMaxValues) + " values");
    Value value;
    value.location_ = loc_;
    char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= kMaxDepth)
        fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
      if (c == '{')
        parseObject(value, depth + 1);
      else
        parseArray(value, depth + 1);
    } else if (c == '"') {
      value.kind_ = Value::Kind::String;
      value.string_ = parseString();
    } else if (c == 't' || c == 'f') {
      expectLiteral(c == 't' ? "true" : "false");
      value.kind_ = Value::Kind::Bool;
      value.bool_ = c == 't';
    } else if (c == 'n') {
      expectLiteral("null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      parseNumber(value);
    } else {
      fail("unexpected " + describe(c) + ", expected a value");
    }
    return value;
  }

  void parseObject(Value &value, int depth) {
    value.kind_ = Value::Kind::Object;
    advance(); // '{'
    skipWhitespace();
    if (!atEnd() && peek() == '}') {
      advance();
      return;
    }
    // The keys seen so far: a duplicate check in linear time.
    std::unordered_set<std::string> seen;
    while (true) {
      skipWhitespace();
      if (atEnd())
        fail("unexpected end of input, expected a string key");
      if (peek() != '"')
        fail("unexpected " + describe(peek()) + ", expected a string key");
      Location keyLoc = loc_;
      std::string key = parseString();
      if (!seen.insert(key).second)
        failAt(keyLoc, "duplicate key '" + key + "'");
      skipWhitespace();
      if (atEnd() || peek() != ':')
        fail("expected ':' after the object key '" + key + "'");
      advance();
      skipWhitespace();
      value.object_.emplace_back(std::move(key), parseValue(depth));
      skipWhitespace();
      if (atEnd())
        fail("unexpected end of input, expected ',' or '}'");
      if (peek() == '}') {
        advance();
        return;
      }
      if (peek() != ',')
        fail("unexpected " + describe(peek()) + ", expected ',' or '}'");
      advance();
    }
  }

  void parseArray(Value &value, int depth) {
    value.kind_ = Value::Kind::Array;
    advance(); // '['
    skipWhitespace();
    if (!atEnd() && peek() == ']') {
      advance();
      return;
    }
    while (true) {
      skipWhitespace();
      value.array_.push_back(parseValue(depth));
      skipWhitespace();
      if (atEnd())
        fail("unexpected end of input, expected ',' or ']'");
      if (peek() == ']') {
        advance();
        return;
      }
      if (peek() != ',')
        fail("unexpected " + describe(peek()) + ", expected ',' or ']'");
      advance();
    }
  }

  unsigned parseHex4() {
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      if (atEnd())
        fail("unexpected end of input in a \\u escape");
      char c = peek();
      unsigned digit;
      if (c >= '0' && c <= '9')
        digit = c - '0';
      else if (c >= 'a' && c <= 'f')
        digit = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        digit = c - 'A' + 10;
      else
        fail("invalid \\u escape: " + describe(c) + " is not a hex digit");
      code = code * 16 + digit;
      advance();
    }
    return code;
  }

  static void appendUtf8(std::string &out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }

  // A \u escape, the backslash already consumed and the 'u' current.
  unsigned parseUnicodeEscape(Location escapeLoc) {
    advance(); // 'u'
    unsigned code = parseHex4();
    if (code >= 0xdc00 && code <= 0xdfff)
      failAt(escapeLoc, "unpaired low surrogate in a \\u escape");
    if (code < 0xd800 || code > 0xdbff)
      return code;
    // A high surrogate must be followed by an escaped low surrogate.
    if (atEnd() || peek() != '\\')
      failAt(escapeLoc, "unpaired high surrogate in a \\u escape");
    advance();
    if (atEnd() || peek() != 'u')
      failAt(escapeLoc, "unpaired high surrogate in a \\u escape");
    advance();
    unsigned low = parseHex4();
    if (low < 0xdc00 || low > 0xdfff)
      failAt(escapeLoc, "unpaired high surrogate in a \\u escape");
    return 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
  }

  std::string parseString() {
    Location start = loc_;
    advance(); // '"'
    std::string out;
    while (true) {
      if (atEnd())
        failAt(start, "unterminated string");
      char c = peek();
      if (c == '"') {
        advance();
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20)
        fail("unescaped control " + describe(c) + " in a string");
      if (c != '\\') {
        out += c;
        advance();
        continue;
      }
      Location escapeLoc = loc_;
      advance(); // '\\'
      if (atEnd())
        failAt(start, "unterminated string");
      switch (peek()) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case '/':
        out += '/';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u':
        appendUtf8(out, parseUnicodeEscape(escapeLoc));
        continue; // parseUnicodeEscape consumed the digits.
      default:
        failAt(escapeLoc,
               "invalid escape sequence '\\" + std::string(1, peek()) + "'");
      }
      advance();
    }
  }

  void parseNumber(Value &value) {
    Location start = loc_;
    size_t begin = pos_;
    bool integral = true;
    auto digits = [&](const char *after) {
      if (atEnd() || peek() < '0' || peek() > '9')
        fail(std::string("invalid number: expected a digit ") + after);
      while (!atEnd() && peek() >= '0' && peek() <= '9')
        advance();
    };
    if (peek() == '-')
      advance();
    if (!atEnd() && peek() == '0') {
      advance();
      if (!atEnd() && peek() >= '0' && peek() <= '9')
        fail("invalid number: leading zeros are not allowed");
    } else {
      digits(text_[begin] == '-' ? "after '-'" : "");
    }
    if (!atEnd() && peek() == '.') {
      integral = false;
      advance();
      digits("after '.'");
    }
    if (!atEnd() && (peek() == 'e' || peek() == 'E')) {
      integral = false;
      advance();
      if (!atEnd() && (peek() == '+' || peek() == '-'))
        advance();
      digits("in the exponent");
    }
    const char *first = text_.data() + begin;
    const char *last = text_.data() + pos_;
    value.kind_ = Value::Kind::Number;
    auto parsed = std::from_chars(first, last, value.number_);
    if (parsed.ec == std::errc::result_out_of_range)
      failAt(start, "number out of range");
    if (integral) {
      auto asInt = std::from_chars(first, last, value.integer_);
      value.isInteger_ = asInt.ec == std::errc() && asInt.ptr == last;
    }
  }
};

Value parse(std::string_view text) { return Parser(text).parseDocument(); }

} // namespace smla::runtime::json
