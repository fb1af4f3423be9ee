// Copies of device memory as a GPU moves it: an aligned word another process or stream writes
// at the same time is read whole, old or new, never half of each. The host's memmove gives no
// such promise (rep movsb may be interrupted between the bytes of a word), and a reader that
// saw a peer's word torn (0x2FF -> 0x300 read as 0x200) took a correct job for a lost write.
#pragma once

#include <cstddef>
#include <cstdint>

namespace simcuda {

/// Copies `bytes` from `src` to `dst` (the ranges may overlap, as with memmove). Where both
/// addresses and the size are multiples of 8 (or 4) bytes, each 8 (4) byte word is read and
/// written with one access.
void device_copy(void *dst, const void *src, size_t bytes);

}  // namespace simcuda
