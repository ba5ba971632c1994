// SPDX-License-Identifier: Apache-2.0
// The public view of the remote tier (RemoteCacheClient, graphattn/jit.hpp): its size, and copying
// verified entries between it and a cache directory. Every value is verified as the kernel cache
// verifies it (remote_tier.hpp), signatures included when a signing key is given; nothing
// unverified is installed or pushed.
#include <memory>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "jit_cache/cache_directory.hpp"
#include "jit_cache/redis_client.hpp"
#include "jit_cache/remote_tier.hpp"

namespace graphattn {

using detail::DiskTier;
using detail::EntryHeader;
using detail::EntryStatus;
using detail::RedisError;

struct RemoteCacheClient::Impl {
  Impl(detail::RemoteOptions o) : secret(o.signing_key), tier(std::move(o), nullptr) {}
  // Runs a call to the server; its failure is an Error with the same text.
  template <typename F>
  auto call(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const RedisError& e) {
      throw Error(e.what());
    }
  }
  std::string secret;
  detail::RemoteTier tier;
};

namespace {

detail::RemoteOptions remote_options(const std::string& url, std::chrono::milliseconds timeout,
                                     const std::string& signing_key) {
  detail::RemoteOptions o;
  o.url = url;
  o.timeout = timeout;
  o.signing_key = signing_key;
  return o;
}

}  // namespace

RemoteCacheClient::RemoteCacheClient(const std::string& url, std::chrono::milliseconds timeout,
                                     const std::string& signing_key)
    : impl_(std::make_unique<Impl>(remote_options(url, timeout, signing_key))) {}
RemoteCacheClient::~RemoteCacheClient() = default;

const std::string& RemoteCacheClient::where() const { return impl_->tier.where(); }
bool RemoteCacheClient::signing() const { return impl_->tier.signing(); }

RemoteCacheStats RemoteCacheClient::stats() {
  RemoteCacheStats s;
  try {
    s.server_version = impl_->tier.server_version();
    for (const std::string& name : impl_->tier.entry_names()) {
      const uint64_t n = impl_->tier.value_bytes(name);  // STRLEN: the value stays on the server
      if (n == 0) continue;
      ++s.entries;
      s.bytes += n;
    }
    s.available = true;
  } catch (const RedisError& e) {
    s.available = false;
    s.error = e.what();
  }
  return s;
}

std::vector<RemoteTransfer> RemoteCacheClient::push(const CacheDirectory& dir,
                                                    const std::vector<CacheEntryInfo>& entries) {
  const std::unique_ptr<DiskTier> local = dir.impl_->open_for_use(false);
  std::vector<RemoteTransfer> out;
  for (const CacheEntryInfo& e : entries) {
    RemoteTransfer t{e.name, "missing", ""};
    EntryHeader h;
    std::vector<char> payload;
    if (detail::is_key_hex(e.key_hex))
      t.status =
          detail::to_string(local->read(detail::key_from_hex(e.key_hex), &h, &payload, &t.reason));
    if (t.status == "ok")
      impl_->call([&] {
        impl_->tier.put_raw(detail::remote_entry_name(h.key),
                            detail::encode_remote_value(h, payload, impl_->secret));
      });
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<RemoteTransfer> RemoteCacheClient::pull(const CacheDirectory& dir) {
  const std::unique_ptr<DiskTier> local = dir.impl_->open_for_use(true);
  std::vector<RemoteTransfer> out;
  for (const std::string& name : impl_->call([&] { return impl_->tier.entry_names(); })) {
    CacheKey key;
    std::string value;
    if (!detail::key_of_remote_name(name, &key)) continue;  // not an entry name
    RemoteTransfer t{name, "rejected", ""};
    try {
      if (!impl_->tier.get_raw(name, &value)) continue;  // deleted since the scan
    } catch (const detail::RedisReplyTooLarge& e) {
      t.reason = e.what();
      out.push_back(std::move(t));
      continue;
    } catch (const RedisError& e) {
      throw Error(e.what());
    }
    EntryHeader h;
    std::vector<char> payload;
    std::string status;
    if (detail::decode_remote_value(value, key, impl_->secret, &h, &payload, &t.reason)) {
      t.reason = entry_spec_problem(h.spec, static_cast<int>(h.arch), &status);
      if (status == "bad spec") t.reason = "bad spec: " + t.reason;
      if (t.reason.empty()) t.status = dir.impl_->install(*local, h, payload) ? "ok" : "present";
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace graphattn
