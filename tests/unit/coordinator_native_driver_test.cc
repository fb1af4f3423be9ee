// The parts of the native driver loader that need no driver: CUSNAP_DRIVER's values and the
// kernel module version the CLI prints (found on the GPU machine, whose open kernel module
// line put "for" where the version was expected).
#include <gtest/gtest.h>

#include "coordinator/native/native_driver.h"
#include "coordinator_printers.h"

namespace cusnap::coord {
namespace {

TEST(KernelModuleVersion, ProprietaryModuleLine) {
  EXPECT_EQ(KernelModuleVersionFromLine("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
                                        "580.95.05  Tue Sep 30 11:56:25 UTC 2025"),
            "580.95.05");
}

TEST(KernelModuleVersion, OpenModuleLineNamesThePlatformFirst) {
  EXPECT_EQ(KernelModuleVersionFromLine("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                        "580.159.04  Release Build  (dvs-builder@U16-I3-B17-4-3)"),
            "580.159.04");
}

TEST(KernelModuleVersion, NoVersionGivesEmpty) {
  EXPECT_EQ(KernelModuleVersionFromLine(""), "");
  EXPECT_EQ(KernelModuleVersionFromLine("NVRM version: something else 1.2"), "");
  EXPECT_EQ(KernelModuleVersionFromLine("NVRM version: NVIDIA UNIX Kernel Module for x86_64"), "");
}

TEST(DriverChoice, ParsesEveryDocumentedValue) {
  EXPECT_EQ(*ParseDriverChoice(""), DriverChoice::kAuto);
  EXPECT_EQ(*ParseDriverChoice("auto"), DriverChoice::kAuto);
  EXPECT_EQ(*ParseDriverChoice("real"), DriverChoice::kReal);
  EXPECT_EQ(*ParseDriverChoice("sim"), DriverChoice::kSimulated);
  EXPECT_FALSE(ParseDriverChoice("simulated"));
  EXPECT_FALSE(ParseDriverChoice("gpu"));
}

}  // namespace
}  // namespace cusnap::coord
