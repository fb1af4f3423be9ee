// SHA-256 as hex (sha256.h).
#include "coordinator/record/sha256.h"

#include <openssl/evp.h>

namespace cusnap::coord {

std::string HexBytes(const unsigned char* bytes, unsigned n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  return HexBytes(digest, size);
}

}  // namespace cusnap::coord
