// A fresh directory under /tmp for one test, removed at the end.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace zerosim {

class TestDirectory {
 public:
  TestDirectory() {
    char pattern[] = "/tmp/zerosim-test-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    path_ = made != nullptr ? made : "";
  }
  ~TestDirectory() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace zerosim
