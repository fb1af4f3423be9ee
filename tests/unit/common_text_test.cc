// How messages name a process, a CUresult and a VA range (src/common/text.h): the same text
// on the shim's side and the coordinator's.
#include "common/text.h"

#include <cuda.h>
#include <gtest/gtest.h>

namespace cusnap {
namespace {

TEST(MessageText, NamesAProcessWithAndWithoutItsName) {
  EXPECT_EQ(ProcessText(4121), "pid 4121");
  EXPECT_EQ(ProcessText(4121, "python3"), "pid 4121 (python3)");
  EXPECT_EQ(ProcessText(4121, ""), "pid 4121");
}

TEST(MessageText, NamesACUresultByTheDriversNameElseACommonOneElseItsNumber) {
  EXPECT_EQ(CuResultText(CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"),
            "CUDA_ERROR_NOT_SUPPORTED (801)");
  EXPECT_EQ(CuResultText(CUDA_ERROR_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE (1)");
  EXPECT_EQ(CuResultText(CUDA_ERROR_UNKNOWN), "CUDA_ERROR_UNKNOWN (999)");
  EXPECT_EQ(CuResultText(12345), "CUresult 12345");
}

TEST(MessageText, NamesAVaRangeByStartAndSize) {
  EXPECT_EQ(VaRangeText(0x320000000ull, 536870912ull), "[0x320000000, +536870912)");
}

}  // namespace
}  // namespace cusnap
