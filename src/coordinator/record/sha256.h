// SHA-256 (OpenSSL's EVP) as lowercase hex: the checksums of image files (images.h) and of
// the state file (state_file.h).
#pragma once

#include <string>
#include <string_view>

namespace cusnap::coord {

/// `n` raw bytes as lowercase hex (2n characters).
std::string HexBytes(const unsigned char* bytes, unsigned n);

/// The SHA-256 digest of `bytes`, as lowercase hex (64 characters).
std::string Sha256Hex(std::string_view bytes);

}  // namespace cusnap::coord
