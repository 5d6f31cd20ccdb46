//===- Manifest.cpp - Reading and validating the kernel manifest ----------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Validation is strict on everything the runtime uses and silent on keys it
// does not know, so the compiler can add fields without breaking old
// runtimes; changing the meaning of a known key requires a new version.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Manifest.h"

#include "smla/runtime/Error.h"
#include "smla/runtime/LibraryFiles.h"

#include <cctype>
#include <limits>
#include <map>

namespace smla::runtime {

using json::Location;
using json::Value;

namespace {

/// Reads one object of the manifest, turning every problem into an Error
/// that names the kernel (once known) and the key path.
class Reader {
public:
  explicit Reader(std::string subject) : subject_(std::move(subject)) {}
  void setSubject(std::string subject) { subject_ = std::move(subject); }

  [[noreturn]] void fail(Location at, const std::string &key,
                         const std::string &what) const {
    std::string message = "smla: manifest error at " + at.str() + ": ";
    if (!subject_.empty())
      message += subject_ + ": ";
    if (!key.empty())
      message += "key '" + key + "': ";
    throw Error(message + what);
  }

  const Value &require(const Value &object, const std::string &prefix,
                       std::string_view key) const {
    const Value *value = object.find(key);
    if (!value) {
      std::string path = prefix + std::string(key);
      fail(object.location(), "", "missing required key '" + path + "'");
    }
    return *value;
  }

  void expect(const Value &value, Value::Kind kind,
              const std::string &path) const {
    if (value.kind() != kind)
      fail(value.location(), path,
           std::string("expected ") + article(kind) + Value::kindName(kind) +
               ", got " + article(value.kind()) +
               Value::kindName(value.kind()));
  }

  std::string string(const Value &value, const std::string &path) const {
    expect(value, Value::Kind::String, path);
    if (value.asString().empty())
      fail(value.location(), path, "expected a non-empty string");
    return value.asString();
  }

  int64_t integer(const Value &value, const std::string &path, int64_t min,
                  int64_t max) const {
    expect(value, Value::Kind::Number, path);
    if (!value.isInteger() || value.asInteger() < min ||
        value.asInteger() > max)
      fail(value.location(), path,
           "expected an integer in [" + std::to_string(min) + ", " +
               std::to_string(max) + "]");
    return value.asInteger();
  }

private:
  static const char *article(Value::Kind kind) {
    return kind == Value::Kind::Array || kind == Value::Kind::Object ? "an "
                                                                     : "a ";
  }
  std::string subject_;
};

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

/// `text` with control bytes (a NUL, a newline) shown as \xNN.
std::string printable(const std::string &text) {
  std::string out;
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else {
      static const char *hex = "0123456789abcdef";
      out += std::string("\\x") + hex[byte >> 4] + hex[byte & 15];
    }
  }
  return out;
}

std::string readSha256(const Reader &reader, const Value &value) {
  std::string hex = reader.string(value, "sha256");
  bool ok = hex.size() == 64;
  for (char &c : hex) {
    ok = ok && std::isxdigit(static_cast<unsigned char>(c));
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (!ok)
    reader.fail(value.location(), "sha256", "expected 64 hex digits");
  return hex;
}

std::string readCubinPath(const Reader &reader, const Value &value) {
  std::string name = reader.string(value, "cubin");
  // Read from the manifest's directory and nowhere else (LibraryFiles.h).
  if (!isPlainFileName(name))
    reader.fail(value.location(), "cubin",
                "expected a file name in the manifest's directory (no '/', "
                "no NUL byte, not '.' or '..'), got '" +
                    printable(name) + "'");
  return name;
}

KernelConfig readConfig(const Reader &reader, const Value &config,
                        bool allRequired) {
  reader.expect(config, Value::Kind::Object, "config");
  // Kernels other than "bwd" (delta, dkv_cast) depend on only part of the
  // configuration and may leave the rest out.
  auto field = [&](std::string_view key) -> const Value * {
    if (allRequired)
      return &reader.require(config, "config.", key);
    return config.find(key);
  };
  KernelConfig out;
  auto atLeast = [&](std::string_view key, std::optional<int64_t> &slot,
                     int64_t low) {
    if (const Value *value = field(key))
      slot =
          reader.integer(*value, "config." + std::string(key), low, kMaxInt32);
  };
  auto positive = [&](std::string_view key, std::optional<int64_t> &slot) {
    atLeast(key, slot, 1);
  };
  positive("d", out.d);
  // dt = 0: one kv row of width d serves as both K and V (DeepSeek-V4).
  atLeast("dt", out.dt, 0);
  positive("heads", out.heads);
  positive("groups", out.groups);
  positive("block", out.block);
  // Optional in every kind (older manifests have no key: 1 token).
  if (const Value *value = config.find("tokens"))
    out.tokens = reader.integer(*value, "config.tokens", 1, 2);
  if (const Value *value = field("lse_base")) {
    if (value->isInteger() && value->asInteger() == 2)
      out.lseBase = LseBase::Two;
    else if (value->isString() && value->asString() == "e")
      out.lseBase = LseBase::E;
    else
      reader.fail(value->location(), "config.lse_base",
                  "expected 2 (base-2 lse) or \"e\" (natural-log lse)");
  }
  if (const Value *value = field("positions")) {
    reader.expect(*value, Value::Kind::Bool, "config.positions");
    out.positions = value->asBool();
  }
  if (const Value *value = field("dq_type"))
    out.dqType = reader.string(*value, "config.dq_type");
  if (const Value *value = field("dkv_type"))
    out.dkvType = reader.string(*value, "config.dkv_type");
  return out;
}

LaunchSpec readLaunch(const Reader &reader, const Value &launch) {
  reader.expect(launch, Value::Kind::Object, "launch");
  LaunchSpec out;
  const Value &block = reader.require(launch, "launch.", "block");
  reader.expect(block, Value::Kind::Array, "launch.block");
  if (block.asArray().size() != 3)
    reader.fail(block.location(), "launch.block", "expected 3 entries");
  int64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    std::string path = "launch.block[" + std::to_string(i) + "]";
    out.block[i] = reader.integer(block.asArray()[i], path, 1, 1024);
    threads *= out.block[i];
  }
  if (threads > 1024)
    reader.fail(block.location(), "launch.block",
                "a block of " + std::to_string(threads) +
                    " threads exceeds the limit of 1024");

  const Value &grid = reader.require(launch, "launch.", "grid");
  reader.expect(grid, Value::Kind::Array, "launch.grid");
  if (grid.asArray().size() != 3)
    reader.fail(grid.location(), "launch.grid", "expected 3 entries");
  for (int i = 0; i < 3; ++i) {
    const Value &entry = grid.asArray()[i];
    std::string path = "launch.grid[" + std::to_string(i) + "]";
    if (entry.isNumber()) {
      out.grid[i] = GridExpr::constant(
          reader.integer(entry, path, 1, std::numeric_limits<int64_t>::max()));
      continue;
    }
    if (!entry.isString())
      reader.fail(entry.location(), path,
                  std::string("expected an integer or a string, got a ") +
                      Value::kindName(entry.kind()));
    std::string error;
    std::optional<GridExpr> expr = GridExpr::parse(entry.asString(), error);
    if (!expr)
      reader.fail(entry.location(), path,
                  "bad grid expression '" + entry.asString() + "': " + error);
    out.grid[i] = *expr;
  }

  const Value &smem = reader.require(launch, "launch.", "dynamic_smem");
  out.dynamicSmem = static_cast<unsigned>(
      reader.integer(smem, "launch.dynamic_smem", 0, kMaxInt32));
  return out;
}

std::vector<ParamSpec> readParams(const Reader &reader, const Value &params) {
  reader.expect(params, Value::Kind::Array, "params");
  std::vector<ParamSpec> out;
  std::map<std::string, Location> seen;
  for (size_t i = 0; i < params.asArray().size(); ++i) {
    const Value &param = params.asArray()[i];
    std::string prefix = "params[" + std::to_string(i) + "]";
    reader.expect(param, Value::Kind::Object, prefix);
    const Value &nameValue = reader.require(param, prefix + ".", "name");
    std::string name = reader.string(nameValue, prefix + ".name");
    auto [it, inserted] = seen.emplace(name, nameValue.location());
    if (!inserted)
      reader.fail(nameValue.location(), prefix + ".name",
                  "duplicate parameter name '" + name + "' (first at " +
                      it->second.str() + ")");
    const Value &typeValue = reader.require(param, prefix + ".", "type");
    std::string type = reader.string(typeValue, prefix + ".type");
    ParamType parsed;
    if (type == "ptr")
      parsed = ParamType::Ptr;
    else if (type == "i32")
      parsed = ParamType::I32;
    else if (type == "i64")
      parsed = ParamType::I64;
    else if (type == "f32")
      parsed = ParamType::F32;
    else
      reader.fail(typeValue.location(), prefix + ".type",
                  "unknown parameter type '" + type +
                      "' (expected ptr, i32, i64 or f32)");
    out.push_back({name, parsed});
  }
  return out;
}

KernelEntry readKernel(const Value &kernel, size_t index) {
  Reader reader("kernel #" + std::to_string(index));
  reader.expect(kernel, Value::Kind::Object, "");
  KernelEntry out;
  out.name = reader.string(reader.require(kernel, "", "name"), "name");
  reader.setSubject("kernel '" + out.name + "'");
  out.kind = reader.string(reader.require(kernel, "", "kind"), "kind");
  out.cubin = readCubinPath(reader, reader.require(kernel, "", "cubin"));
  out.sha256 = readSha256(reader, reader.require(kernel, "", "sha256"));
  out.entry = reader.string(reader.require(kernel, "", "entry"), "entry");
  out.config = readConfig(reader, reader.require(kernel, "", "config"),
                          out.kind == "bwd");
  out.launch = readLaunch(reader, reader.require(kernel, "", "launch"));
  out.params = readParams(reader, reader.require(kernel, "", "params"));
  for (auto [key, slot] : {std::pair{"compiler", &out.compiler},
                           std::pair{"spec", &out.spec}})
    if (const Value *value = kernel.find(key))
      *slot = reader.string(*value, key);
  return out;
}

} // namespace

Manifest Manifest::parse(std::string_view text) {
  Value root = json::parse(text);
  Reader reader("");
  reader.expect(root, Value::Kind::Object, "");
  const Value &format = reader.require(root, "", "format");
  if (reader.string(format, "format") != "smla-manifest")
    reader.fail(format.location(), "format",
                "expected \"smla-manifest\", got \"" + format.asString() +
                    "\"");
  Manifest out;
  const Value &version = reader.require(root, "", "version");
  reader.expect(version, Value::Kind::Number, "version");
  if (!version.isInteger() || version.asInteger() != kVersion)
    reader.fail(version.location(), "version",
                "unsupported manifest version " +
                    (version.isInteger() ? std::to_string(version.asInteger())
                                         : std::string("(not an integer)")) +
                    " (this runtime reads version " + std::to_string(kVersion) +
                    ")");
  out.target = reader.string(reader.require(root, "", "target"), "target");
  const Value &kernels = reader.require(root, "", "kernels");
  reader.expect(kernels, Value::Kind::Array, "kernels");
  std::map<std::string, Location> seen;
  for (size_t i = 0; i < kernels.asArray().size(); ++i) {
    const Value &kernel = kernels.asArray()[i];
    out.kernels.push_back(readKernel(kernel, i));
    const std::string &name = out.kernels.back().name;
    auto [it, inserted] = seen.emplace(name, kernel.location());
    if (!inserted)
      Reader("kernel '" + name + "'")
          .fail(kernel.find("name")->location(), "name",
                "duplicate kernel name (first defined at " + it->second.str() +
                    ")");
  }
  return out;
}

const KernelEntry *Manifest::find(std::string_view name) const {
  for (const KernelEntry &kernel : kernels)
    if (kernel.name == name)
      return &kernel;
  return nullptr;
}

} // namespace smla::runtime
