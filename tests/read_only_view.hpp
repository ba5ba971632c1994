// SPDX-License-Identifier: Apache-2.0
// A read-only view of a directory, as a read-only image layer would be (tests of layered and
// read-only cache directories, and of kernel bundles baked into an image).
#pragma once

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "tests/test_util.hpp"

namespace graphattn::test {

// A read-only view of a directory, as a read-only image layer would be: for root (whom modes do
// not stop) a read-only bind mount, for anyone else the directory with its write bits taken
// away. ok() is false where neither is possible (no mount privilege); why() says so.
class ReadOnlyView {
 public:
  explicit ReadOnlyView(const std::string& dir) : dir_(dir) {
    if (::geteuid() != 0) {
      ok_ = ::chmod(dir.c_str(), 0555) == 0;
      path_ = dir;
      if (!ok_) why_ = "chmod failed";
      return;
    }
    path_ = mount_point_.path();
    if (::mount(dir.c_str(), path_.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      why_ = std::string("bind mount: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
    if (::mount(nullptr, path_.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
      why_ = std::string("read-only remount: ") + std::strerror(errno);
      return;
    }
    ok_ = true;
  }
  ~ReadOnlyView() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    if (::geteuid() != 0) ::chmod(dir_.c_str(), 0700);
  }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  TempDir mount_point_;
  std::string path_;
  std::string why_;
  bool mounted_ = false;
  bool ok_ = false;
};

}  // namespace graphattn::test
