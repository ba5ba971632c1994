// SPDX-License-Identifier: Apache-2.0
// graphattn-cache and the remote tier: the remote part of `stats`, `push` (local entries to
// Redis) and `pull` (Redis values into the local directory). Every value is verified as the
// kernel cache verifies it (jit_cache/remote_tier.hpp), signatures included when a signing key is
// configured; nothing unverified is installed or pushed.
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/spec.hpp"
#include "jit_cache/redis_client.hpp"
#include "jit_cache/remote_tier.hpp"
#include "jit_cache/trust.hpp"
#include "tools/cache/cache_tool.hpp"

namespace graphattn::tools::cache_tool {

using graphattn::detail::RedisError;
using graphattn::detail::RemoteTier;

std::string signing_secret(const Options& o) {
  const bool shared = graphattn::detail::shared_cache_requested();
  if (!o.signing_key_file.empty())
    return graphattn::detail::read_signing_key(o.signing_key_file, shared);
  if (const char* f = std::getenv("GRAPHATTN_CACHE_SIGNING_KEY"); f && *f)
    return graphattn::detail::read_signing_key(f, shared);
  return "";
}

namespace {

// The tier the commands talk to; throws graphattn::Error when none is configured or this build
// cannot reach Redis.
std::unique_ptr<RemoteTier> open_remote(const Options& o) {
  if (o.remote.empty())
    throw UsageError(
        "no remote cache: give --remote redis://HOST:PORT or set GRAPHATTN_REMOTE_CACHE");
  graphattn::detail::RemoteOptions ro;
  ro.url = o.remote;
  ro.timeout = std::chrono::milliseconds(o.remote_timeout_ms);
  ro.signing_key = signing_secret(o);
  auto tier = std::make_unique<RemoteTier>(ro, nullptr);
  std::string why;
  if (!graphattn::detail::redis_client_loadable(&why))
    throw graphattn::Error("remote cache " + tier->where() + " is configured, but " + why);
  return tier;
}

// Whether a verified entry's stored spec parses and names its arch (what check_entry asks of a
// file): a value that passes the checksums but names another arch is not installed.
std::string spec_problem(const graphattn::detail::EntryHeader& h) {
  try {
    const graphattn::AttentionSpec spec = graphattn::AttentionSpec::parse(h.spec);
    if (static_cast<uint32_t>(spec.arch) != h.arch)
      return "header arch sm_" + std::to_string(h.arch) + " differs from the spec's sm_" +
             std::to_string(spec.arch);
  } catch (const std::exception& e) {
    return std::string("bad spec: ") + e.what();
  }
  return "";
}

}  // namespace

std::unique_ptr<DiskTier> open_local(const Options& o, bool create) {
  const bool exists = require_directory_path(o.dir);
  if (!exists && !create)
    throw graphattn::Error("cache directory " + printable(o.dir, 4096) + " does not exist");
  std::string warning;
  auto tier = std::make_unique<DiskTier>(
      o.dir, [&](const std::string& w) { warning = w; },
      graphattn::detail::shared_cache_requested());
  if (!tier->usable() || (create && !tier->writable()))
    throw graphattn::Error("the cache directory " + printable(o.dir, 4096) + " cannot be used" +
                           (warning.empty() ? std::string() : ": " + warning) +
                           (tier->read_only_why().empty() ? "" : ": " + tier->read_only_why()));
  return tier;
}

Json remote_stats(const Options& o) {
  Json j = {{"url", nullptr}, {"built_in", graphattn::detail::redis_client_built_in()}};
  if (o.remote.empty()) {
    j["configured"] = false;
    return j;
  }
  j["configured"] = true;
  std::string why;
  if (!graphattn::detail::redis_client_loadable(&why)) {
    j["url"] = graphattn::detail::parse_redis_url(o.remote).display();
    j["available"] = false;
    j["error"] = why;
    return j;
  }
  std::unique_ptr<RemoteTier> tier = open_remote(o);
  j["url"] = tier->where();
  j["signing"] = tier->signing();
  try {
    j["server_version"] = tier->server_version();
    uint64_t count = 0, bytes = 0;
    for (const std::string& name : tier->entry_names()) {
      const uint64_t n = tier->value_bytes(name);  // STRLEN: the value stays on the server
      if (n == 0) continue;
      ++count;
      bytes += n;
    }
    j["available"] = true;
    j["entries"] = count;
    j["bytes"] = bytes;
  } catch (const RedisError& e) {
    j["available"] = false;
    j["error"] = e.what();
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
  std::unique_ptr<DiskTier> local = open_local(o, false);
  std::unique_ptr<RemoteTier> remote = open_remote(o);
  uint64_t pushed = 0, bad = 0, bytes = 0;
  Json skipped = Json::array();
  for (const EntryInfo& e : local->list()) {
    const Check c = check_entry(e);
    graphattn::detail::EntryHeader h;
    std::vector<char> payload;
    std::string reason;
    std::string status = c.status;
    if (c.ok && c.status == "ok") {
      const EntryStatus s = local->read(e.header.key, &h, &payload, &reason);
      status = graphattn::detail::to_string(s);
    }
    if (status == "ok") {
      remote->put_raw(graphattn::detail::remote_entry_name(h.key),
                      graphattn::detail::encode_remote_value(
                          h, payload, remote->signing() ? signing_secret(o) : ""));
      ++pushed;
      bytes += e.file_bytes;
      continue;
    }
    ++bad;
    skipped.push_back(
        {{"name", e.name}, {"status", status}, {"reason", c.reason.empty() ? reason : c.reason}});
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
  std::unique_ptr<RemoteTier> remote = open_remote(o);
  std::unique_ptr<DiskTier> local = open_local(o, true);
  const std::string secret = remote->signing() ? signing_secret(o) : "";
  uint64_t pulled = 0, present = 0;
  Json rejected = Json::array();
  for (const std::string& name : remote->entry_names()) {
    graphattn::CacheKey key;
    std::string value;
    if (!graphattn::detail::key_of_remote_name(name, &key)) continue;  // not an entry name
    try {
      if (!remote->get_raw(name, &value)) continue;  // deleted since the scan
    } catch (const graphattn::detail::RedisReplyTooLarge& e) {
      rejected.push_back({{"name", name}, {"reason", e.what()}});
      continue;
    }
    graphattn::detail::EntryHeader h;
    std::vector<char> payload;
    std::string why;
    if (!graphattn::detail::decode_remote_value(value, key, secret, &h, &payload, &why) ||
        !(why = spec_problem(h)).empty()) {
      rejected.push_back({{"name", name}, {"reason", why}});
      continue;
    }
    graphattn::detail::EntryHeader have;
    std::vector<char> have_payload;
    if (local->read(key, &have, &have_payload, nullptr) == EntryStatus::kOk) {
      ++present;
      continue;
    }
    if (!local->write(h, payload))
      throw graphattn::Error("cannot write an entry into " + printable(o.dir, 4096));
    ++pulled;
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
