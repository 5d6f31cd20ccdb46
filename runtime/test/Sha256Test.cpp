//===- Sha256Test.cpp - Tests for SHA-256 ---------------------------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Sha256.h"

#include <gtest/gtest.h>

using namespace smla::runtime;

namespace {

// Vectors from FIPS 180-2 / NIST CAVP.
TEST(Sha256, EmptyString) {
  EXPECT_EQ(sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, Abc) {
  EXPECT_EQ(sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, TwoBlockMessage) {
  EXPECT_EQ(
      sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, MillionA) {
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalUpdatesMatchOneShotAcrossBlockBoundaries) {
  std::string message;
  for (int i = 0; i < 1000; ++i)
    message += static_cast<char>(i * 7 + 3);
  std::string expected = sha256Hex(message);
  // Chunk sizes straddle the 64-byte block and the 56-byte padding limit.
  for (size_t chunk : {1u, 3u, 55u, 56u, 63u, 64u, 65u, 127u, 999u}) {
    Sha256 hasher;
    for (size_t at = 0; at < message.size(); at += chunk)
      hasher.update(std::string_view(message).substr(at, chunk));
    EXPECT_EQ(Sha256::toHex(hasher.finish()), expected) << "chunk " << chunk;
  }
}

TEST(Sha256, PaddingEdgeLengths) {
  // 55 bytes fit the length in the same block; 56 need a second one.
  EXPECT_EQ(sha256Hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256Hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

} // namespace
