// device_copy (device_copy.h): relaxed atomic word accesses, which the compiler neither splits
// nor turns back into a call of memmove.
#include "device_copy.h"

#include <cstring>

namespace simcuda {
namespace {

template <typename Word>
void copy_words(void *dst, const void *src, size_t bytes) {
  auto *to = static_cast<Word *>(dst);
  const auto *from = static_cast<const Word *>(src);
  const size_t count = bytes / sizeof(Word);
  auto move = [&](size_t i) { __atomic_store_n(&to[i], __atomic_load_n(&from[i], __ATOMIC_RELAXED), __ATOMIC_RELAXED); };
  if (to <= from || to >= from + count) {
    for (size_t i = 0; i < count; ++i) move(i);
  } else {  // dst overlaps the end of src: backwards, as memmove does
    for (size_t i = count; i-- > 0;) move(i);
  }
}

bool aligned(const void *dst, const void *src, size_t bytes, size_t word) {
  return reinterpret_cast<uintptr_t>(dst) % word == 0 && reinterpret_cast<uintptr_t>(src) % word == 0 &&
         bytes % word == 0;
}

}  // namespace

void device_copy(void *dst, const void *src, size_t bytes) {
  if (aligned(dst, src, bytes, sizeof(uint64_t))) {
    copy_words<uint64_t>(dst, src, bytes);
  } else if (aligned(dst, src, bytes, sizeof(uint32_t))) {
    copy_words<uint32_t>(dst, src, bytes);
  } else {
    std::memmove(dst, src, bytes);
  }
}

}  // namespace simcuda
