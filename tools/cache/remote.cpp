// SPDX-License-Identifier: Apache-2.0
// graphattn-cache and the remote tier: the remote part of `stats`, `push` (local entries to
// Redis) and `pull` (Redis values into the local directory). Every value is verified as the
// kernel cache verifies it (graphattn::RemoteCacheClient), signatures included when a signing key
// is configured; nothing unverified is installed or pushed.
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/spec.hpp"
#include "tools/cache/cache_tool.hpp"

namespace graphattn::tools::cache_tool {

using graphattn::RemoteCacheClient;
using graphattn::RemoteTransfer;

std::string signing_secret(const Options& o) {
  return graphattn::cache_signing_key(o.signing_key_file);
}

namespace {

// The tier the commands talk to; throws graphattn::Error when none is configured or this build
// cannot reach Redis.
std::unique_ptr<RemoteCacheClient> open_remote(const Options& o) {
  if (o.remote.empty())
    throw UsageError(
        "no remote cache: give --remote redis://HOST:PORT or set GRAPHATTN_REMOTE_CACHE");
  auto remote = std::make_unique<RemoteCacheClient>(
      o.remote, std::chrono::milliseconds(o.remote_timeout_ms), signing_secret(o));
  std::string why;
  if (!graphattn::remote_available(&why))
    throw graphattn::Error("remote cache " + remote->where() + " is configured, but " + why);
  return remote;
}

}  // namespace

std::unique_ptr<CacheDirectory> open_local(const Options& o, bool create) {
  require_directory_path(o.dir);
  auto dir = std::make_unique<CacheDirectory>(o.dir);
  dir->require_usable(create);
  return dir;
}

Json remote_stats(const Options& o) {
  std::string why;
  const bool available = graphattn::remote_available(&why);
  Json j = {{"url", nullptr}, {"built_in", available}};
  if (o.remote.empty()) {
    j["configured"] = false;
    return j;
  }
  j["configured"] = true;
  if (!available) {
    j["url"] =
        RemoteCacheClient(o.remote, std::chrono::milliseconds(o.remote_timeout_ms), "").where();
    j["available"] = false;
    j["error"] = why;
    return j;
  }
  std::unique_ptr<RemoteCacheClient> remote = open_remote(o);
  j["url"] = remote->where();
  j["signing"] = remote->signing();
  const graphattn::RemoteCacheStats s = remote->stats();
  j["available"] = s.available;
  if (s.available) {
    j["server_version"] = s.server_version;
    j["entries"] = s.entries;
    j["bytes"] = s.bytes;
  } else {
    j["error"] = s.error;
  }
  return j;
}

void print_remote_stats(const Json& r) {
  if (!r["configured"].get<bool>()) {
    std::cout << "remote          none (--remote or GRAPHATTN_REMOTE_CACHE)"
              << (r["built_in"].get<bool>() ? "" : "; this build has no Redis client") << "\n";
    return;
  }
  std::cout << "remote          " << r["url"].get<std::string>();
  if (!r["available"].get<bool>()) {
    std::cout << " (unavailable: " << r["error"].get<std::string>() << ")\n";
    return;
  }
  std::cout << " (Redis " << r["server_version"].get<std::string>() << ", "
            << (r["signing"].get<bool>() ? "values signed" : "values not signed") << ")\n"
            << "remote entries  " << r["entries"].get<uint64_t>() << " ("
            << human_bytes(r["bytes"].get<uint64_t>()) << ")\n";
}

int cmd_push(const Options& o) {
  std::unique_ptr<CacheDirectory> local = open_local(o, false);
  std::unique_ptr<RemoteCacheClient> remote = open_remote(o);
  const std::vector<EntryInfo> entries = local->list();
  // The entries that pass the tool's checks go to the library, which reads each as the kernel
  // cache does and pushes what verifies; the others are skipped with the check's verdict.
  std::vector<EntryInfo> chosen;
  std::vector<Check> checks;
  for (const EntryInfo& e : entries) {
    checks.push_back(check_entry(e));
    if (checks.back().ok && checks.back().status == "ok") chosen.push_back(e);
  }
  const std::vector<RemoteTransfer> sent = remote->push(*local, chosen);
  uint64_t pushed = 0, bad = 0, bytes = 0;
  Json skipped = Json::array();
  for (size_t i = 0, next = 0; i < entries.size(); ++i) {
    const EntryInfo& e = entries[i];
    const Check& c = checks[i];
    std::string status = c.status, reason = c.reason;
    if (c.ok && c.status == "ok") {
      status = sent[next].status;
      reason = sent[next++].reason;
    }
    if (status == "ok") {
      ++pushed;
      bytes += e.file_bytes;
      continue;
    }
    ++bad;
    skipped.push_back({{"name", e.name}, {"status", status}, {"reason", reason}});
  }
  if (o.json) {
    print_json({{"dir", o.dir},
                {"remote", remote->where()},
                {"signed", remote->signing()},
                {"pushed", pushed},
                {"bytes", bytes},
                {"skipped", skipped}});
  } else {
    std::cout << "pushed " << plural(pushed, "entry", "entries") << " (" << human_bytes(bytes)
              << ") from " << o.dir << " to " << remote->where()
              << (remote->signing() ? ", signed" : "") << "\n";
    for (const auto& s : skipped)
      std::cout << "skipped " << s["name"].get<std::string>() << ": "
                << s["status"].get<std::string>() << " " << s["reason"].get<std::string>() << "\n";
  }
  return bad ? kExitFailed : kExitOk;
}

int cmd_pull(const Options& o) {
  std::unique_ptr<RemoteCacheClient> remote = open_remote(o);
  std::unique_ptr<CacheDirectory> local = open_local(o, true);
  uint64_t pulled = 0, present = 0;
  Json rejected = Json::array();
  for (const RemoteTransfer& t : remote->pull(*local)) {
    if (t.status == "ok")
      ++pulled;
    else if (t.status == "present")
      ++present;
    else
      rejected.push_back({{"name", t.name}, {"reason", t.reason}});
  }
  if (o.json) {
    print_json({{"dir", o.dir},
                {"remote", remote->where()},
                {"signed", remote->signing()},
                {"pulled", pulled},
                {"present", present},
                {"rejected", rejected}});
  } else {
    std::cout << "pulled " << plural(pulled, "entry", "entries") << " from " << remote->where()
              << " into " << o.dir << "; " << present << " already there, " << rejected.size()
              << " rejected\n";
    for (const auto& r : rejected)
      std::cout << "rejected " << r["name"].get<std::string>() << ": "
                << r["reason"].get<std::string>() << "\n";
  }
  return rejected.empty() ? kExitOk : kExitFailed;
}

}  // namespace graphattn::tools::cache_tool
