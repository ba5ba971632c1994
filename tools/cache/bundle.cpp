// SPDX-License-Identifier: Apache-2.0
// graphattn-cache export / import: kernel bundles (CacheDirectory::export_bundle and
// import_bundle, graphattn/jit.hpp), one file of verified entries that a build step writes and an
// image or a new host installs without compiling.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "tools/cache/cache_tool.hpp"

namespace graphattn::tools::cache_tool {

namespace {

// The kernels of --spec/--model, compiled into --dir (or found there, or remotely) first.
std::vector<std::shared_ptr<const graphattn::CompiledKernel>> requested_kernels(const Options& o) {
  const std::vector<graphattn::AttentionSpec> specs = requested_specs(o);
  ToolCache tool(o);
  double wall_ms = 0;
  std::string failed;
  for (const auto& r : tool.precompile(specs, &wall_ms))
    if (!r.error.empty()) failed += "\n  " + r.spec + ": " + r.error;
  if (!failed.empty()) throw graphattn::Error("these kernels failed to compile:" + failed);
  std::vector<std::shared_ptr<const graphattn::CompiledKernel>> kernels;
  for (const auto& spec : specs) kernels.push_back(tool.cache->get(spec));  // a memory hit now
  return kernels;
}

Json member_json(const graphattn::BundleImport::Member& m) {
  Json j = {{"key", m.key_hex},
            {"spec", m.spec},
            {"arch", m.arch},
            {"verdict", m.verdict},
            {"action", m.action}};
  if (!m.reason.empty()) j["reason"] = m.reason;
  return j;
}

}  // namespace

int cmd_export(const Options& o) {
  const std::string nothing = "nothing to export: " + printable(o.dir, 4096) +
                              " holds no verified entry of this build (give --model or --spec)";
  graphattn::BundleExport x;
  std::string secret;
  if (!o.specs.empty() || !o.models.empty()) {
    const auto kernels = requested_kernels(o);
    if (kernels.empty()) throw graphattn::Error(nothing);
    secret = signing_secret(o);
    x = graphattn::export_kernels(o.bundle, kernels, secret);
  } else {
    const std::unique_ptr<CacheDirectory> local = open_local(o, false);
    const std::vector<EntryInfo> entries = local->list();
    if (std::none_of(entries.begin(), entries.end(), [](const EntryInfo& e) { return e.current; }))
      throw graphattn::Error(nothing);
    secret = signing_secret(o);
    x = local->export_bundle(o.bundle, secret);
  }
  if (o.json) {
    print_json({{"bundle", o.bundle},
                {"entries", x.entries},
                {"cubin_bytes", x.cubin_bytes},
                {"signed", !secret.empty()},
                {"left_out", x.left_out},
                {"specs", x.specs}});
  } else {
    std::cout << "exported " << plural(x.entries, "entry", "entries") << " ("
              << human_bytes(x.cubin_bytes) << " of cubins) to " << o.bundle
              << (secret.empty() ? "" : ", signed") << "\n";
    if (x.left_out)
      std::cout << "left out " << plural(x.left_out, "entry", "entries")
                << " of the directory that are bad or stale (graphattn-cache verify)\n";
  }
  return kExitOk;
}

int cmd_import(const Options& o) {
  const std::string secret = signing_secret(o);
  if (!o.dry_run) require_directory_path(o.dir);
  const CacheDirectory local(o.dir);
  const graphattn::BundleImport bundle = local.import_bundle(o.bundle, secret, o.dry_run);
  Json list = Json::array();
  for (const auto& m : bundle.members) list.push_back(member_json(m));
  // What the entries were checked against is this process's NVRTC and cache format; the
  // manifest's lines are the writer's claims, shown as such.
  const auto [major, minor] = graphattn::nvrtc_version();
  const std::string nvrtc = std::to_string(major) + "." + std::to_string(minor);
  const std::string claimed_nvrtc =
      std::to_string(bundle.nvrtc_major) + "." + std::to_string(bundle.nvrtc_minor);
  // A signature line is only a claim too until a key has checked it (read_bundle refuses a bad
  // one when a key is configured).
  const bool verified = bundle.signed_bundle && !secret.empty();
  const std::string signature = verified ? "signed (signature verified)"
                                : bundle.signed_bundle
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
         {"installed", bundle.installed},
         {"present", bundle.present},
         {"stale", bundle.stale},
         {"bad", bundle.bad},
         {"entries", list}});
  } else {
    for (const auto& m : bundle.members)
      if (m.verdict != "ok")
        std::cout << m.verdict << "  " << printable(m.spec) << ": " << m.reason << "\n";
    std::cout << (o.dry_run ? "verified " : "imported ") << o.bundle
              << (o.dry_run ? "" : " into " + o.dir) << ": " << bundle.installed << " installed, "
              << bundle.present << " already there, " << bundle.stale << " stale, " << bundle.bad
              << " bad"
              << (o.dry_run
                      ? " (dry run: " +
                            std::to_string(bundle.members.size() - bundle.stale - bundle.bad) +
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
  return bundle.bad ? kExitFailed : kExitOk;
}

}  // namespace graphattn::tools::cache_tool
