// A scratch directory of a test's own under /tmp: made fresh for each test, removed after it.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

namespace cusnap::testing {

/// Makes a fresh directory /tmp/cusnap-<name>.XXXXXX and returns its path ("" when mkdtemp
/// fails).
inline std::string MakeScratchDir(const std::string& name) {
  std::string templ = "/tmp/cusnap-" + name + ".XXXXXX";
  return ::mkdtemp(templ.data()) != nullptr ? templ : "";
}

/// A test with a scratch directory of its own: SetUp makes dir_ (/tmp/cusnap-<name>.XXXXXX,
/// a fatal failure when it cannot); TearDown removes it with all it holds, whatever
/// permissions the test left on it. A derived fixture's SetUp calls this one first (and
/// returns on a fatal failure), its TearDown last.
class ScratchDirTest : public ::testing::Test {
 protected:
  explicit ScratchDirTest(std::string name) : name_(std::move(name)) {}
  void SetUp() override {
    dir_ = MakeScratchDir(name_);
    ASSERT_FALSE(dir_.empty()) << "mkdtemp /tmp/cusnap-" << name_;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(dir_, ec);
  }

  std::string dir_;

 private:
  std::string name_;
};

}  // namespace cusnap::testing
