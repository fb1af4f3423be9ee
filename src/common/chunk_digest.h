// The digest of an image file's chunk (DESIGN.md "Main job", the images manifest): XXH3-128
// (xxHash 0.8, compiled inline: it links nothing, so the shim may compute it). It detects
// accidental corruption (a flipped bit, a torn or truncated write, a file of another dump);
// it is no signature: anyone who can write the images can write matching digests.
// Measured beside SHA-256 by bench/digest_bench.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cusnap {

/// A chunk's XXH3-128 digest.
struct ChunkDigest {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const ChunkDigest&) const = default;
};

/// XXH3-128 of `bytes` bytes at `data` (seed 0).
ChunkDigest DigestOf(const void* data, size_t bytes);

/// XXH3-128 of bytes given piece by piece (the same digest as DigestOf of them all): a chunk
/// is hashed a block at a time beside its write or read, while the block is in the cache.
class ChunkHasher {
 public:
  ChunkHasher();
  ChunkHasher(const ChunkHasher&) = delete;
  ChunkHasher& operator=(const ChunkHasher&) = delete;
  void Update(const void* data, size_t bytes);
  ChunkDigest Finish() const;

 private:
  alignas(64) unsigned char state_[640];  // XXH3_state_t, inline (chunk_digest.cc checks)
};

/// The digest as 32 lowercase hex digits, high half first (what `xxh128sum` prints).
std::string DigestHex(const ChunkDigest& digest);

/// Parses DigestHex's text; false when `text` is not 32 hex digits.
bool ParseDigestHex(std::string_view text, ChunkDigest& digest);

/// The digest's name as the manifest records it.
inline constexpr const char* kChunkDigestName = "xxh3-128";

}  // namespace cusnap
