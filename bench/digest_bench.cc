// The images' chunk digest against SHA-256 (docs/DESIGN.md "Main job"; README "Checkpoint to
// disk"): GB/s of one thread digesting a buffer in 64 MiB chunks with XXH3-128 (what the
// shims and the coordinator compute, common/chunk_digest.h) and with SHA-256 (OpenSSL, what
// manifests of format 1 and 2 recorded), beside memcpy of the same bytes (what a copy through
// the page cache costs at least), best of 3 runs each. Not a test: timings are not pass/fail.
//
//   build/release/bin/digest_bench [MiB, default 1024]
#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "common/chunk_digest.h"

namespace {

constexpr size_t kChunk = size_t{64} << 20;

/// Best GB/s of `runs` runs of `work` over `bytes` bytes.
double Rate(size_t bytes, const std::function<void()>& work, int runs = 3) {
  double best = 0;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    work();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const size_t bytes = mib << 20;
  std::vector<unsigned char> data(bytes), copy(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  std::memset(copy.data(), 1, bytes);
  volatile uint64_t sink = 0;
  const double xxh3 = Rate(bytes, [&] {
    for (size_t at = 0; at < bytes; at += kChunk) {
      sink = sink + cusnap::DigestOf(data.data() + at, std::min(kChunk, bytes - at)).low;
    }
  });
  const double sha256 = Rate(bytes, [&] {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned size = 0;
    for (size_t at = 0; at < bytes; at += kChunk) {
      EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
      EVP_DigestUpdate(ctx, data.data() + at, std::min(kChunk, bytes - at));
      EVP_DigestFinal_ex(ctx, digest, &size);
      sink = sink + digest[0];
    }
    EVP_MD_CTX_free(ctx);
  });
  const double memcpy_rate = Rate(bytes, [&] { std::memcpy(copy.data(), data.data(), bytes); });
  std::printf("digest_bench: %zu MiB, one thread, chunks of %zu MiB, best of 3\n", mib, kChunk >> 20);
  std::printf("  xxh3-128  %7.2f GB/s  (%.2fx memcpy)\n", xxh3, xxh3 / memcpy_rate);
  std::printf("  sha-256   %7.2f GB/s  (%.2fx memcpy)\n", sha256, sha256 / memcpy_rate);
  std::printf("  memcpy    %7.2f GB/s\n", memcpy_rate);
  std::printf("  xxh3-128 / sha-256: %.1fx\n", xxh3 / sha256);
  return sink == 42 ? 1 : 0;
}
