//===- Error.h - The smla runtime's exception type --------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Every failure in the runtime is reported by throwing smla::runtime::Error.
// Messages start with "smla: " and name what failed (the kernel, its
// configuration, the CUDA call and the driver's error name and string, or the
// manifest key and its line:column), so a user can act on the message alone.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_RUNTIME_ERROR_H
#define SMLA_RUNTIME_ERROR_H

#include <stdexcept>
#include <string>

namespace smla::runtime {

/// The one exception type the runtime throws.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

/// A JSON syntax error; line and column are 1-based, columns count bytes.
class JsonError : public Error {
public:
  JsonError(const std::string &message, int line, int column)
      : Error(message), line_(line), column_(column) {}
  int line() const { return line_; }
  int column() const { return column_; }

private:
  int line_;
  int column_;
};

} // namespace smla::runtime

#endif // SMLA_RUNTIME_ERROR_H
