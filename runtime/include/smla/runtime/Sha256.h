//===- Sha256.h - SHA-256 for cubin integrity checks ------------*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// FIPS 180-4 SHA-256. The manifest records each cubin's digest so that a
// cubin from another build (or a truncated copy) is rejected before it reaches
// the driver. Not constant-time; integrity, not secrecy, is the goal.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_RUNTIME_SHA256_H
#define SMLA_RUNTIME_SHA256_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace smla::runtime {

/// Incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  void update(const void *data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  Digest finish();

  /// Lowercase hex of `digest` (64 characters).
  static std::string toHex(const Digest &digest);

private:
  void compressBlock(const uint8_t *block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

/// Lowercase hex SHA-256 of `bytes`.
std::string sha256Hex(std::string_view bytes);

} // namespace smla::runtime

#endif // SMLA_RUNTIME_SHA256_H
