//===- GridExpr.cpp - Launch-grid rules over run-time sizes ---------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Grammar (whitespace between tokens is ignored):
//   expr := INT | VAR | "ceil_div" "(" VAR "," INT ")"
//   VAR  := "T" | "S_kv" | "K" | "H" | "G"
// Integers are positive: a grid dimension or divisor of zero is meaningless.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Error.h"
#include "smla/runtime/Manifest.h"

#include <cctype>
#include <charconv>

namespace smla::runtime {

namespace {

struct Token {
  enum Kind { Ident, Int, Punct, End } kind;
  std::string_view text;
};

/// Splits `text` into tokens; returns false and sets `error` on a bad char.
bool tokenize(std::string_view text, std::vector<Token> &tokens,
              std::string &error) {
  size_t i = 0;
  auto isIdent = [](char c) {
    return std::isalnum((unsigned char)c) || c == '_';
  };
  while (i < text.size()) {
    char c = text[i];
    if (std::isspace((unsigned char)c)) {
      ++i;
    } else if (std::isdigit((unsigned char)c)) {
      size_t begin = i;
      while (i < text.size() && std::isdigit((unsigned char)text[i]))
        ++i;
      if (i < text.size() && isIdent(text[i])) {
        error = "malformed token '" +
                std::string(text.substr(begin, i + 1 - begin)) + "'";
        return false;
      }
      tokens.push_back({Token::Int, text.substr(begin, i - begin)});
    } else if (std::isalpha((unsigned char)c) || c == '_') {
      size_t begin = i;
      while (i < text.size() && isIdent(text[i]))
        ++i;
      tokens.push_back({Token::Ident, text.substr(begin, i - begin)});
    } else if (c == '(' || c == ')' || c == ',') {
      tokens.push_back({Token::Punct, text.substr(i, 1)});
      ++i;
    } else {
      error = std::string("unexpected character '") + c + "'";
      return false;
    }
  }
  tokens.push_back({Token::End, {}});
  return true;
}

const char *varName(GridExpr::Var var) {
  switch (var) {
  case GridExpr::Var::T:
    return "T";
  case GridExpr::Var::S_kv:
    return "S_kv";
  case GridExpr::Var::K:
    return "K";
  case GridExpr::Var::H:
    return "H";
  case GridExpr::Var::G:
    return "G";
  }
  return "?";
}

std::optional<GridExpr::Var> lookupVar(std::string_view name) {
  for (auto var : {GridExpr::Var::T, GridExpr::Var::S_kv, GridExpr::Var::K,
                   GridExpr::Var::H, GridExpr::Var::G})
    if (name == varName(var))
      return var;
  return std::nullopt;
}

} // namespace

GridExpr GridExpr::constant(int64_t value) {
  GridExpr expr;
  expr.kind_ = Kind::Constant;
  expr.value_ = value;
  return expr;
}

std::optional<GridExpr> GridExpr::parse(std::string_view text,
                                        std::string &error) {
  std::vector<Token> tokens;
  if (!tokenize(text, tokens, error))
    return std::nullopt;
  size_t next = 0;
  auto describe = [](const Token &token) {
    return token.kind == Token::End ? std::string("the end")
                                    : "'" + std::string(token.text) + "'";
  };
  auto parseInt = [&](const char *what) -> std::optional<int64_t> {
    const Token &token = tokens[next];
    if (token.kind != Token::Int) {
      error = std::string("expected ") + what + ", found " + describe(token);
      return std::nullopt;
    }
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(
        token.text.data(), token.text.data() + token.text.size(), value);
    if (ec != std::errc() || value < 1) {
      error = std::string(what) + " '" + std::string(token.text) +
              "' is not an integer in [1, 2^63)";
      return std::nullopt;
    }
    ++next;
    return value;
  };
  auto parseVar = [&]() -> std::optional<Var> {
    const Token &token = tokens[next];
    std::optional<Var> var;
    if (token.kind == Token::Ident)
      var = lookupVar(token.text);
    if (!var)
      error =
          "expected a variable (T, S_kv, K, H or G), found " + describe(token);
    else
      ++next;
    return var;
  };
  auto expectPunct = [&](char c) {
    const Token &token = tokens[next];
    if (token.kind == Token::Punct && token.text[0] == c) {
      ++next;
      return true;
    }
    error = std::string("expected '") + c + "', found " + describe(token);
    return false;
  };

  GridExpr expr;
  const Token &first = tokens[0];
  if (first.kind == Token::End) {
    error = "empty expression";
    return std::nullopt;
  }
  if (first.kind == Token::Int) {
    auto value = parseInt("a grid constant");
    if (!value)
      return std::nullopt;
    expr = constant(*value);
  } else if (first.kind == Token::Ident && first.text == "ceil_div") {
    ++next;
    if (!expectPunct('('))
      return std::nullopt;
    auto var = parseVar();
    if (!var || !expectPunct(','))
      return std::nullopt;
    auto divisor = parseInt("a divisor");
    if (!divisor || !expectPunct(')'))
      return std::nullopt;
    expr.kind_ = Kind::CeilDiv;
    expr.var_ = *var;
    expr.value_ = *divisor;
  } else {
    auto var = parseVar();
    if (!var)
      return std::nullopt;
    expr.kind_ = Kind::Variable;
    expr.var_ = *var;
  }
  if (tokens[next].kind != Token::End) {
    error = "unexpected " + describe(tokens[next]) + " after the expression";
    return std::nullopt;
  }
  return expr;
}

int64_t GridExpr::evaluate(const GridSizes &sizes) const {
  if (kind_ == Kind::Constant)
    return value_;
  int64_t x = 0;
  switch (var_) {
  case Var::T:
    x = sizes.T;
    break;
  case Var::S_kv:
    x = sizes.S_kv;
    break;
  case Var::K:
    x = sizes.K;
    break;
  case Var::H:
    x = sizes.H;
    break;
  case Var::G:
    x = sizes.G;
    break;
  }
  if (x < 0)
    throw Error("smla: grid rule '" + str() + "' read " + varName(var_) + "=" +
                std::to_string(x) + ", but sizes must be >= 0");
  if (kind_ == Kind::Variable)
    return x;
  return x / value_ + (x % value_ != 0);
}

std::string GridExpr::str() const {
  switch (kind_) {
  case Kind::Constant:
    return std::to_string(value_);
  case Kind::Variable:
    return varName(var_);
  case Kind::CeilDiv:
    return std::string("ceil_div(") + varName(var_) + ", " +
           std::to_string(value_) + ")";
  }
  return "?";
}

} // namespace smla::runtime
