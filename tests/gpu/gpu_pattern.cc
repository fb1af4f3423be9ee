// Pattern fill and check through host staging copies (gpu_pattern.h).
#include "gpu/gpu_pattern.h"

#include <algorithm>
#include <vector>

#include "gpu/gpu_check.h"

namespace gpu {
namespace {

constexpr size_t kChunkBytes = size_t{64} << 20;

// One staging buffer per process: the test programs fill and verify from one thread.
std::vector<uint64_t>& Staging() {
  static std::vector<uint64_t> buffer(kChunkBytes / sizeof(uint64_t));
  return buffer;
}

}  // namespace

uint64_t PatternWord(uint64_t seed, uint64_t index) {
  // splitmix64 of (seed, index): cheap, and no two nearby words or seeds collide in practice.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void FillPattern(CUdeviceptr va, size_t bytes, uint64_t seed) {
  if (bytes % 8 != 0) Fail("FillPattern: %zu bytes is not a multiple of 8", bytes);
  std::vector<uint64_t>& buffer = Staging();
  for (size_t done = 0; done < bytes; done += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - done);
    const uint64_t first = done / 8;
    for (size_t i = 0; i < n / 8; ++i) buffer[i] = PatternWord(seed, first + i);
    CU(cuMemcpyHtoD(va + done, buffer.data(), n));
  }
}

bool VerifyPattern(CUdeviceptr va, size_t bytes, uint64_t seed, const char* what) {
  if (bytes % 8 != 0) Fail("VerifyPattern: %zu bytes is not a multiple of 8", bytes);
  std::vector<uint64_t>& buffer = Staging();
  uint64_t bad_words = 0;
  uint64_t first_bad_byte = 0;
  uint64_t expected_word = 0;
  uint64_t found_word = 0;
  for (size_t done = 0; done < bytes; done += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - done);
    const uint64_t first = done / 8;
    CU(cuMemcpyDtoH(buffer.data(), va + done, n));
    for (size_t i = 0; i < n / 8; ++i) {
      const uint64_t want = PatternWord(seed, first + i);
      if (buffer[i] == want) continue;
      if (bad_words == 0) {
        expected_word = want;
        found_word = buffer[i];
        // The first differing byte inside the word (little-endian byte order).
        unsigned byte = 0;
        while (((want >> (8 * byte)) & 0xff) == ((buffer[i] >> (8 * byte)) & 0xff)) ++byte;
        first_bad_byte = (first + i) * 8 + byte;
      }
      ++bad_words;
    }
  }
  if (bad_words == 0) {
    Log("verify %s: all %zu bytes match pattern 0x%llx (VA 0x%llx)", what, bytes,
        static_cast<unsigned long long>(seed), static_cast<unsigned long long>(va));
    return true;
  }
  Log("verify %s: MISMATCH at byte offset %llu of %zu (VA 0x%llx): expected word 0x%016llx, "
      "found 0x%016llx; %llu of %zu words differ (pattern 0x%llx)",
      what, static_cast<unsigned long long>(first_bad_byte), bytes,
      static_cast<unsigned long long>(va), static_cast<unsigned long long>(expected_word),
      static_cast<unsigned long long>(found_word), static_cast<unsigned long long>(bad_words),
      bytes / 8, static_cast<unsigned long long>(seed));
  return false;
}

uint64_t DeviceDigest(CUdeviceptr va, size_t bytes) {
  if (bytes % 8 != 0) Fail("DeviceDigest: %zu bytes is not a multiple of 8", bytes);
  std::vector<uint64_t>& buffer = Staging();
  uint64_t digest = 0xcbf29ce484222325ull;
  for (size_t done = 0; done < bytes; done += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - done);
    CU(cuMemcpyDtoH(buffer.data(), va + done, n));
    for (size_t i = 0; i < n / 8; ++i) digest = (digest ^ buffer[i]) * 0x100000001b3ull;
  }
  return digest;
}

}  // namespace gpu
