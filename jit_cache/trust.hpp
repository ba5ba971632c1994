// SPDX-License-Identifier: Apache-2.0
// Who may have written a cache directory and its files. A cache entry is code the process runs on
// the GPU, so the disk tier loads only from a directory that nobody else can write:
//
//   private (default): the directory is owned by this user (or root) and not writable by group
//     or others; every file in it is a regular file owned by this user (or root) and not writable
//     by group or others.
//   shared (GRAPHATTN_CACHE_SHARED=1): a directory deliberately shared by a group (typically
//     mode 2770, setgid so that new files take its group). It must not be writable by others,
//     and must be owned by this user or root or belong to one of this process's groups (a
//     directory someone else made, under /tmp say, is not shared with us);
//     its files must be regular, not writable by others, and owned by this user, root or the
//     directory's owner, or belong to the directory's group. It trusts every member of that group:
//     any of them can plant an entry that this process will load.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

namespace graphattn::detail {

struct TrustPolicy {
  bool shared = false;  // GRAPHATTN_CACHE_SHARED=1
  uid_t uid = 0;        // the effective user of this process
  static TrustPolicy current(bool shared);
  mode_t dir_mode() const { return shared ? 02770 : 0700; }  // directories it creates
  mode_t file_mode() const { return shared ? 0640 : 0600; }  // files it creates
};

// GRAPHATTN_CACHE_SHARED: unset, empty or "0" is false, "1" true; anything else throws
// graphattn::Error naming the value.
bool shared_cache_requested();

// "" when the directory `dir` (its fstat) may be loaded from; otherwise what is wrong and what is
// required, naming the path, the owner and the mode found.
std::string directory_trust_problem(const std::string& dir, const struct stat& st,
                                    const TrustPolicy& policy);
// "" when a file (its fstat, not following links) in a directory (dir_st) that passed may be
// read; otherwise what is wrong, naming the owner and mode found.
std::string file_trust_problem(const struct stat& st, const struct stat& dir_st,
                               const TrustPolicy& policy);
// "a FIFO", "a directory", ... for messages.
const char* file_type_name(mode_t mode);
// "uid 1000 (alice)", "gid 1000 (staff)".
std::string user_text(uid_t uid);
std::string group_text(gid_t gid);
// Whether gid is this process's effective group or one of its supplementary groups.
bool in_my_groups(gid_t gid);
// "0755".
std::string mode_text(mode_t mode);

}  // namespace graphattn::detail
