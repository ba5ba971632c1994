// SPDX-License-Identifier: Apache-2.0
// graphattn-cache export / import: kernel bundles (jit_cache/bundle.hpp), one file of verified
// entries that a build step writes and an image or a new host installs without compiling.
#include "jit_cache/bundle.hpp"

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "tools/cache/cache_tool.hpp"

namespace graphattn::tools::cache_tool {

using graphattn::detail::Bundle;
using graphattn::detail::BundleEntry;
using graphattn::detail::BundleMember;

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The kernels of --spec/--model, compiled into --dir (or found there, or remotely) first.
std::vector<BundleEntry> requested_entries(const Options& o) {
  const std::vector<graphattn::AttentionSpec> specs = requested_specs(o);
  ToolCache tool(o);
  double wall_ms = 0;
  std::string failed;
  for (const auto& r : tool.precompile(specs, &wall_ms))
    if (!r.error.empty()) failed += "\n  " + r.spec + ": " + r.error;
  if (!failed.empty()) throw graphattn::Error("these kernels failed to compile:" + failed);
  std::vector<BundleEntry> entries;
  const auto [major, minor] = graphattn::nvrtc_version();
  for (const auto& spec : specs) {
    const auto k = tool.cache->get(spec);  // a memory hit now
    BundleEntry e;
    e.header.key = k->key;
    e.header.arch = static_cast<uint32_t>(spec.arch);
    e.header.nvrtc_major = static_cast<uint32_t>(major);
    e.header.nvrtc_minor = static_cast<uint32_t>(minor);
    e.header.compiled_at_ms = k->compiled_at_ms;
    e.header.compile_us = static_cast<uint64_t>(k->compile_ms * 1000.0);
    e.header.spec = k->spec_string;
    e.payload = k->cubin;
    entries.push_back(std::move(e));
  }
  return entries;
}

// Every verified entry of --dir that this build would look up (stale ones are left out).
std::vector<BundleEntry> directory_entries(const Options& o, uint64_t* left_out) {
  std::unique_ptr<DiskTier> local = open_local(o, false);
  std::vector<BundleEntry> entries;
  for (const EntryInfo& info : local->list()) {
    const Check c = check_entry(info);
    const Json current = is_current(info);
    BundleEntry e;
    if (c.ok && c.status == "ok" && current.is_boolean() && current.get<bool>() &&
        local->read(info.header.key, &e.header, &e.payload, nullptr) == EntryStatus::kOk) {
      entries.push_back(std::move(e));
    } else {
      ++*left_out;
    }
  }
  return entries;
}

Json member_json(const BundleMember& m, const char* action) {
  Json j = {{"key", m.key_hex},
            {"spec", m.spec},
            {"arch", m.arch},
            {"verdict", graphattn::detail::to_string(m.verdict)},
            {"action", action}};
  if (!m.reason.empty()) j["reason"] = m.reason;
  return j;
}

}  // namespace

int cmd_export(const Options& o) {
  const bool requested = !o.specs.empty() || !o.models.empty();
  uint64_t left_out = 0;
  const std::vector<BundleEntry> entries =
      requested ? requested_entries(o) : directory_entries(o, &left_out);
  if (entries.empty())
    throw graphattn::Error("nothing to export: " + printable(o.dir, 4096) +
                           " holds no verified entry of this build (give --model or --spec)");
  const std::string secret = signing_secret(o);
  graphattn::detail::write_bundle(o.bundle, entries, secret, now_ms());
  uint64_t bytes = 0;
  for (const auto& e : entries) bytes += e.payload.size();
  if (o.json) {
    Json specs = Json::array();
    for (const auto& e : entries) specs.push_back(e.header.spec);
    print_json({{"bundle", o.bundle},
                {"entries", entries.size()},
                {"cubin_bytes", bytes},
                {"signed", !secret.empty()},
                {"left_out", left_out},
                {"specs", specs}});
  } else {
    std::cout << "exported " << plural(entries.size(), "entry", "entries") << " ("
              << human_bytes(bytes) << " of cubins) to " << o.bundle
              << (secret.empty() ? "" : ", signed") << "\n";
    if (left_out)
      std::cout << "left out " << plural(left_out, "entry", "entries")
                << " of the directory that are bad or stale (graphattn-cache verify)\n";
  }
  return kExitOk;
}

int cmd_import(const Options& o) {
  const std::string secret = signing_secret(o);
  const Bundle bundle = graphattn::detail::read_bundle(o.bundle, secret);
  std::unique_ptr<DiskTier> local;
  if (!o.dry_run) local = open_local(o, true);
  uint64_t installed = 0, present = 0, stale = 0, bad = 0;
  Json list = Json::array();
  for (const BundleMember& m : bundle.members) {
    const char* action = "not installed";
    if (m.verdict == BundleMember::Verdict::kStale) {
      ++stale;
    } else if (m.verdict == BundleMember::Verdict::kBad) {
      ++bad;
    } else if (o.dry_run) {
      action = "would install";
    } else {
      graphattn::detail::EntryHeader have;
      std::vector<char> have_payload;
      if (local->read(m.entry.header.key, &have, &have_payload, nullptr) == EntryStatus::kOk) {
        ++present;
        action = "present";
      } else if (local->write(m.entry.header, m.entry.payload)) {
        ++installed;
        action = "installed";
      } else {
        throw graphattn::Error("cannot write an entry into " + printable(o.dir, 4096));
      }
    }
    list.push_back(member_json(m, action));
  }
  // What the entries were checked against is this process's NVRTC and cache format; the
  // manifest's lines are the writer's claims, shown as such.
  const auto [major, minor] = graphattn::nvrtc_version();
  const std::string nvrtc = std::to_string(major) + "." + std::to_string(minor);
  const std::string claimed_nvrtc =
      std::to_string(bundle.nvrtc_major) + "." + std::to_string(bundle.nvrtc_minor);
  // A signature line is only a claim too until a key has checked it (read_bundle refuses a bad
  // one when a key is configured).
  const bool verified = bundle.signed_ && !secret.empty();
  const std::string signature = verified ? "signed (signature verified)"
                                : bundle.signed_
                                    ? "unsigned (no key configured to verify its signature)"
                                    : "unsigned";
  if (o.json) {
    print_json(
        {{"bundle", o.bundle},
         {"dir", o.dir},
         {"dry_run", o.dry_run},
         {"signed", verified},
         {"signature", signature},
         {"checked_against", {{"nvrtc", nvrtc}, {"cache_format", graphattn::kCacheFormatVersion}}},
         {"manifest_claims", {{"nvrtc", claimed_nvrtc}, {"cache_format", bundle.cache_format}}},
         {"installed", installed},
         {"present", present},
         {"stale", stale},
         {"bad", bad},
         {"entries", list}});
  } else {
    for (const BundleMember& m : bundle.members)
      if (m.verdict != BundleMember::Verdict::kOk)
        std::cout << graphattn::detail::to_string(m.verdict) << "  " << printable(m.spec) << ": "
                  << m.reason << "\n";
    std::cout << (o.dry_run ? "verified " : "imported ") << o.bundle
              << (o.dry_run ? "" : " into " + o.dir) << ": " << installed << " installed, "
              << present << " already there, " << stale << " stale, " << bad << " bad"
              << (o.dry_run ? " (dry run: " + std::to_string(bundle.members.size() - stale - bad) +
                                  " would be installed)"
                            : "")
              << "\n"
              << "entries checked against this process's NVRTC " << nvrtc << " and cache format "
              << graphattn::kCacheFormatVersion;
    if (claimed_nvrtc != nvrtc || bundle.cache_format != graphattn::kCacheFormatVersion)
      std::cout << " (the manifest claims NVRTC " << claimed_nvrtc << ", cache format "
                << bundle.cache_format << ")";
    std::cout << "; " << signature << "\n";
  }
  return bad ? kExitFailed : kExitOk;
}

}  // namespace graphattn::tools::cache_tool
