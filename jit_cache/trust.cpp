// SPDX-License-Identifier: Apache-2.0
#include "jit_cache/trust.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/text.hpp"
#include "graphattn/error.hpp"

namespace graphattn::detail {

TrustPolicy TrustPolicy::current(bool shared) {
  TrustPolicy p;
  p.shared = shared;
  p.uid = ::geteuid();
  return p;
}

bool shared_cache_requested() {
  const char* v = std::getenv("GRAPHATTN_CACHE_SHARED");
  if (!v || !*v || std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  throw Error("GRAPHATTN_CACHE_SHARED='" + printable(v) +
              "' is not supported; supported: 1 (a deliberately shared cache directory) or 0");
}

const char* file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

std::string user_text(uid_t uid) {
  std::string out = "uid " + std::to_string(uid);
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(4096);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found)
    out += " (" + printable(found->pw_name, 32) + ")";
  return out;
}

std::string group_text(gid_t gid) {
  std::string out = "gid " + std::to_string(gid);
  struct group gr {};
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found)
    out += " (" + printable(found->gr_name, 32) + ")";
  return out;
}

bool in_my_groups(gid_t gid) {
  if (gid == ::getegid()) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  const int got = ::getgroups(n, groups.data());
  for (int i = 0; i < got; ++i)
    if (groups[static_cast<size_t>(i)] == gid) return true;
  return false;
}

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string directory_trust_problem(const std::string& dir, const struct stat& st,
                                    const TrustPolicy& policy) {
  const std::string where = "cache directory " + printable(dir, 4096);
  if (!S_ISDIR(st.st_mode)) return where + " is " + file_type_name(st.st_mode);
  const std::string found =
      " (found: owner " + user_text(st.st_uid) + ", mode " + mode_text(st.st_mode) + ")";
  if (policy.shared) {
    if (st.st_mode & S_IWOTH)
      return where + " is writable by every user" + found +
             "; even a shared cache (GRAPHATTN_CACHE_SHARED=1) must not be writable by others: "
             "chmod o-w it";
    // Shared with a group this process belongs to, or kept by this user or root: not a
    // directory that someone else made under a path this process happens to look at.
    if (st.st_uid != policy.uid && st.st_uid != 0 && !in_my_groups(st.st_gid))
      return where + " belongs to another user" + found + " and its group " +
             group_text(st.st_gid) +
             " is not one of this process's groups; a shared cache (GRAPHATTN_CACHE_SHARED=1) "
             "must be owned by this user (" +
             user_text(policy.uid) + ") or root, or belong to a group this process is in";
    return "";
  }
  if (st.st_uid != policy.uid && st.st_uid != 0)
    return where + " belongs to another user" + found + "; required: owned by this user (" +
           user_text(policy.uid) +
           ") or root and not writable by group or others, e.g. mode 0700; set "
           "GRAPHATTN_CACHE_SHARED=1 only for a directory deliberately shared by a group";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return where + " is writable by " + (st.st_mode & S_IWOTH ? "every user" : "its group") +
           found +
           "; required: not writable by group or others (chmod 700 it), or "
           "GRAPHATTN_CACHE_SHARED=1 for a directory deliberately shared by a group";
  return "";
}

std::string file_trust_problem(const struct stat& st, const struct stat& dir_st,
                               const TrustPolicy& policy) {
  if (!S_ISREG(st.st_mode)) return std::string("is ") + file_type_name(st.st_mode);
  const std::string found =
      " (found: owner " + user_text(st.st_uid) + ", mode " + mode_text(st.st_mode) + ")";
  const bool own = st.st_uid == policy.uid || st.st_uid == 0;
  if (policy.shared) {
    if (st.st_mode & S_IWOTH) return "is writable by every user" + found;
    if (!own && st.st_uid != dir_st.st_uid && st.st_gid != dir_st.st_gid)
      return "belongs to a user outside the shared directory's group" + found;
    return "";
  }
  if (!own)
    return "belongs to another user" + found + "; required: owned by this user (" +
           user_text(policy.uid) + ") or root";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return "is writable by group or others" + found + "; required: mode 0600";
  return "";
}

}  // namespace graphattn::detail
