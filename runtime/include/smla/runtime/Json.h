//===- Json.h - A small JSON reader for the kernel manifest -----*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// A strict RFC 8259 reader: objects, arrays, strings with every escape
// (including surrogate pairs), numbers, true, false and null. The runtime has
// no dependencies besides the CUDA driver, so it carries its own parser.
//
// Every value remembers the line:column where it starts, so manifest errors
// can point at the offending text. Syntax errors throw JsonError with the
// line:column of the first byte that could not be accepted. Objects keep
// their members in document order; a repeated key is an error.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_RUNTIME_JSON_H
#define SMLA_RUNTIME_JSON_H

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace smla::runtime::json {

/// A position in the source text; both fields are 1-based.
struct Location {
  int line = 1;
  int column = 1;
  /// "line:column".
  std::string str() const;
};

class Value;
using Array = std::vector<Value>;
using Member = std::pair<std::string, Value>;
using Object = std::vector<Member>;

/// One parsed JSON value.
class Value {
public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Value() = default;

  Kind kind() const { return kind_; }
  Location location() const { return location_; }

  bool isNull() const { return kind_ == Kind::Null; }
  bool isBool() const { return kind_ == Kind::Bool; }
  bool isNumber() const { return kind_ == Kind::Number; }
  /// True for a number written without fraction or exponent that fits int64.
  bool isInteger() const { return kind_ == Kind::Number && isInteger_; }
  bool isString() const { return kind_ == Kind::String; }
  bool isArray() const { return kind_ == Kind::Array; }
  bool isObject() const { return kind_ == Kind::Object; }

  // The accessors below throw Error when the value has another kind.
  bool asBool() const;
  double asNumber() const;
  int64_t asInteger() const;
  const std::string &asString() const;
  const Array &asArray() const;
  const Object &asObject() const;

  /// The member named `key` of an object, or nullptr (also for non-objects).
  const Value *find(std::string_view key) const;

  /// "null", "boolean", "number", "string", "array" or "object".
  static const char *kindName(Kind kind);

private:
  friend class Parser;
  Kind kind_ = Kind::Null;
  Location location_;
  bool bool_ = false;
  bool isInteger_ = false;
  double number_ = 0;
  int64_t integer_ = 0;
  std::string string_;
  Array array_;
  Object object_;
};

/// Parses one JSON document (surrounding whitespace allowed). Throws
/// JsonError("smla: JSON parse error at L:C: ...") on malformed input.
Value parse(std::string_view text);

} // namespace smla::runtime::json

#endif // SMLA_RUNTIME_JSON_H
