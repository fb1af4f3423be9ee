// XXH3-128 of a chunk (chunk_digest.h), inline from xxhash.h: nothing to link.
#include "common/chunk_digest.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace cusnap {

ChunkDigest DigestOf(const void* data, size_t bytes) {
  const XXH128_hash_t h = XXH3_128bits(data, bytes);
  return ChunkDigest{h.high64, h.low64};
}

static_assert(sizeof(XXH3_state_t) <= 640 && alignof(XXH3_state_t) <= 64);

ChunkHasher::ChunkHasher() {
  XXH3_128bits_reset(reinterpret_cast<XXH3_state_t*>(state_));
}

void ChunkHasher::Update(const void* data, size_t bytes) {
  XXH3_128bits_update(reinterpret_cast<XXH3_state_t*>(state_), data, bytes);
}

ChunkDigest ChunkHasher::Finish() const {
  const XXH128_hash_t h = XXH3_128bits_digest(reinterpret_cast<const XXH3_state_t*>(state_));
  return ChunkDigest{h.high64, h.low64};
}

std::string DigestHex(const ChunkDigest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text(32, '0');
  for (int i = 0; i < 16; ++i) {
    text[static_cast<size_t>(15 - i)] = kHex[(digest.high >> (4 * i)) & 0xf];
    text[static_cast<size_t>(31 - i)] = kHex[(digest.low >> (4 * i)) & 0xf];
  }
  return text;
}

bool ParseDigestHex(std::string_view text, ChunkDigest& digest) {
  if (text.size() != 32) return false;
  uint64_t halves[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = text[i];
    int v = -1;
    if (c >= '0' && c <= '9') v = c - '0';
    if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    if (v < 0) return false;
    halves[i / 16] = (halves[i / 16] << 4) | static_cast<uint64_t>(v);
  }
  digest = ChunkDigest{halves[0], halves[1]};
  return true;
}

}  // namespace cusnap
