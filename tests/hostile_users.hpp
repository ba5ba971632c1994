// SPDX-License-Identifier: Apache-2.0
// Two unprivileged users for the tests of what one local user can do to another (a victim and an
// attacker), created with useradd when the tests run as root (as CI does) and removed at scope
// exit. Elsewhere available() is false and why() says so: those tests skip with that message.
#pragma once

#include <doctest/doctest.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

namespace graphattn::test {

class HostileUsers {
 public:
  HostileUsers() {
    if (::geteuid() != 0) {
      why_ = "creating two unprivileged users needs root (CI runs the tests as root)";
      return;
    }
    if (std::system("command -v useradd >/dev/null 2>&1 && command -v userdel >/dev/null 2>&1") !=
        0) {
      why_ = "useradd/userdel are not installed (Debian: passwd)";
      return;
    }
    const std::string tag = std::to_string(::getpid() % 100000);
    victim_name_ = "ga-victim-" + tag;
    attacker_name_ = "ga-attack-" + tag;
    // Names that exist already (a run killed before its clean-up) are not ours to reuse.
    if (::getpwnam(victim_name_.c_str()) || ::getpwnam(attacker_name_.c_str())) {
      why_ = "users " + victim_name_ + "/" + attacker_name_ + " exist already";
      victim_name_.clear();
      attacker_name_.clear();
      return;
    }
    for (std::string* n : {&victim_name_, &attacker_name_}) {
      const std::string cmd = "useradd --system --user-group --no-create-home --shell /bin/false " +
                              *n + " >/dev/null 2>&1";
      if (std::system(cmd.c_str()) != 0) {
        why_ = "useradd " + *n + " failed";
        n->clear();  // not ours to remove
        return;
      }
    }
    victim_ = lookup(victim_name_, &victim_gid_);
    attacker_ = lookup(attacker_name_, &attacker_gid_);
  }
  ~HostileUsers() {
    for (const std::string* n : {&attacker_name_, &victim_name_})
      if (!n->empty()) std::system(("userdel " + *n + " >/dev/null 2>&1").c_str());
  }
  HostileUsers(const HostileUsers&) = delete;
  HostileUsers& operator=(const HostileUsers&) = delete;

  bool available() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  uid_t victim() const { return victim_; }
  gid_t victim_gid() const { return victim_gid_; }
  uid_t attacker() const { return attacker_; }
  gid_t attacker_gid() const { return attacker_gid_; }
  const std::string& victim_name() const { return victim_name_; }
  const std::string& attacker_name() const { return attacker_name_; }

  // Runs fn in a child process as `uid` with only its own group `gid` (no supplementary groups),
  // killed after `seconds`; its exit status, or -1 when it did not exit normally.
  static int run_as(uid_t uid, gid_t gid, int seconds, const std::function<int()>& fn) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::alarm(static_cast<unsigned>(seconds));
      if (::setgroups(1, &gid) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) _exit(100);
      _exit(fn());
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  static uid_t lookup(const std::string& name, gid_t* gid) {
    const passwd* pw = ::getpwnam(name.c_str());
    REQUIRE(pw != nullptr);
    *gid = pw->pw_gid;
    return pw->pw_uid;
  }
  std::string why_;
  std::string victim_name_, attacker_name_;
  uid_t victim_ = 0, attacker_ = 0;
  gid_t victim_gid_ = 0, attacker_gid_ = 0;
};

#define GA_REQUIRE_HOSTILE_USERS(users)      \
  do {                                       \
    if (!(users).available()) {              \
      MESSAGE("skipped: " << (users).why()); \
      return;                                \
    }                                        \
  } while (0)

}  // namespace graphattn::test
