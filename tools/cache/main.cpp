// SPDX-License-Identifier: Apache-2.0
// graphattn-cache: the operator's view of a JIT kernel cache directory. It lists, shows, checks,
// prunes and clears the entries that KernelCache writes, and fills the cache ahead of time.
//
//   graphattn-cache [--dir DIR] [--json] list | show KEY-PREFIX|SPEC | verify [--fix [--force]]
//                                        | prune --max-bytes N | --older-than DAYS [--force]
//                                        | clear [--force] | stats
//                                        | compile --spec SPEC [--spec SPEC ...] [--threads N]
//                                        | push | pull   (with --remote URL [--signing-key FILE])
//                                        | export BUNDLE [--model M --arch 90,100 | --spec S]
//                                        | import BUNDLE [--dry-run]
//
// Exit status: 0 success; 1 the command found a problem or could not do its job (a bad entry,
// a failed compile, no such entry); 2 wrong usage. With --json every command, failures
// included, prints exactly one JSON document on stdout; messages for people go to stderr.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "graphattn/jit.hpp"
#include "graphattn/log.hpp"
#include "tools/cache/cache_tool.hpp"
#include "tools/version.hpp"

using namespace graphattn::tools::cache_tool;

namespace {

// Reports a failure: to stderr for people and, with --json, as the one document on stdout.
int report_error(const std::string& message, bool json, int code, const std::string& usage) {
  std::cerr << "graphattn-cache: " << message << "\n";
  if (!usage.empty()) std::cerr << "\n" << usage;
  if (json) print_json({{"error", message}, {"exit_code", code}});
  return code;
}

// CLI11 reports an unknown command as a missing one; name it and the commands there are.
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc,
                                 char** argv) {
  if (!app.get_subcommands().empty()) return e.what();
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({}))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dir" || a == "--remote" || a == "--signing-key" || a == "--remote-timeout-ms") {
      ++i;  // its value
    } else if (!a.empty() && a[0] != '-') {
      return "unknown command '" + a + "'; the commands are " + names;
    }
  }
  return std::string(e.what()) + "; the commands are " + names;
}

// Runs stats or verify on each of o.layers: one layer as before; several, each under a heading
// (one JSON document {"layers": [...], "remote": ...}), the worst exit status.
int for_each_layer(const Options& o, int (*cmd)(const Options&)) {
  if (o.layers.size() == 1) {
    Options one = o;
    one.dir = o.layers[0];
    return cmd(one);
  }
  int code = kExitOk;
  Json docs = Json::array();
  {
    std::unique_ptr<JsonCapture> capture(o.json ? new JsonCapture : nullptr);
    for (size_t i = 0; i < o.layers.size(); ++i) {
      Options one = o;
      one.dir = o.layers[i];
      one.skip_remote = true;
      if (!o.json)
        std::cout << (i ? "\n" : "") << "layer " << i + 1 << " of " << o.layers.size()
                  << " (GRAPHATTN_CACHE_DIRS): " << printable(one.dir, 4096) << "\n";
      code = std::max(code, cmd(one));
    }
    if (capture)
      for (Json& d : capture->docs) {
        d.erase("remote");
        docs.push_back(std::move(d));
      }
  }
  const bool stats = cmd == cmd_stats;
  if (o.json) {
    Json out = {{"layers", docs}};
    if (stats) out["remote"] = remote_stats(o);
    print_json(out);
  } else if (stats) {
    std::cout << "\n";
    print_remote_stats(remote_stats(o));
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // --json must shape the output even when the command line fails to parse.
  bool json_requested = false;
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i)
    json_requested = json_requested || std::strcmp(argv[i], "--json") == 0;

  Options o;
  CLI::App app("Inspect, check, fill, prune or clear the graphattn JIT kernel cache.",
               "graphattn-cache");
  app.fallthrough();  // --dir and --json are accepted after the command too
  app.require_subcommand(1);
  std::string default_dir;
  try {
    default_dir = graphattn::default_cache_dir();
  } catch (const std::exception& ex) {
    return report_error(ex.what(), json_requested, kExitUsage, "");
  }
  o.dir = default_dir;
  CLI::Option* dir_option = app.add_option(
      "--dir", o.dir,
      "cache directory (default: GRAPHATTN_CACHE_DIR, else $XDG_CACHE_HOME/graphattn, "
      "else ~/.cache/graphattn; now " +
          (default_dir.empty() ? std::string("none") : printable(default_dir)) + ")");
  app.add_flag("--json", o.json, "print exactly one JSON document on stdout");
  app.set_version_flag("--version", graphattn::tools::version_text("graphattn-cache"),
                       "print the tool's, the library's and NVRTC's versions and exit");
  if (const char* url = std::getenv("GRAPHATTN_REMOTE_CACHE")) o.remote = url;
  app.add_option("--remote", o.remote,
                 "remote cache, redis://[[user]:password@]host[:port][/db] (default: "
                 "GRAPHATTN_REMOTE_CACHE): shown by stats, used by push, pull and compile");
  app.add_option("--signing-key", o.signing_key_file,
                 "file holding the secret that signs remote values (default: "
                 "GRAPHATTN_CACHE_SIGNING_KEY)");
  app.add_option("--remote-timeout-ms", o.remote_timeout_ms,
                 "connect and read timeout of each call to the remote cache")
      ->check(CLI::Range(1, 600000))
      ->capture_default_str();

  CLI::App* list = app.add_subcommand("list", "one row per entry, then totals");
  CLI::App* show = app.add_subcommand("show", "every header field of one entry, and its source");
  show->add_option("entry", o.target, "a unique key prefix (hex) or a spec string")->required();
  CLI::App* verify = app.add_subcommand("verify", "re-check every entry; exit 1 if any is bad");
  verify->add_flag("--fix", o.fix, "remove the bad entries and stale temp files");
  const char* force_help =
      "remove files also from a directory that is not marked as a graphattn cache";
  verify->add_flag("--force", o.force, force_help);
  CLI::App* prune = app.add_subcommand("prune", "remove entries by size cap or by age");
  prune->add_option("--max-bytes", o.max_bytes_text,
                    "remove least recently used entries until the total is at most N bytes "
                    "(K, M, G suffixes)");
  prune
      ->add_option("--older-than", o.older_than_days,
                   "remove entries not used for more than DAYS days")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double d = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !std::isfinite(d) || d < 0)
              return "DAYS must be a number >= 0 (fractions allowed, e.g. 0.5), not '" + v + "'";
            return "";
          },
          "DAYS"));
  CLI::App* clear = app.add_subcommand(
      "clear", "remove every entry, lock, source and temp file (other files stay)");
  clear->add_flag("--force", o.force, force_help);
  prune->add_flag("--force", o.force, force_help);
  CLI::App* stats = app.add_subcommand(
      "stats",
      "entries and bytes, by kernel kind and by arch (every layer of GRAPHATTN_CACHE_DIRS)");
  CLI::App* compile = app.add_subcommand("compile", "compile specs into the cache ahead of time");
  compile->add_option("--spec", o.specs,
                      "a spec string such as "
                      "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90; repeatable");
  compile->add_option("--model", o.models,
                      "every kernel of a built-in model (llama-3-8b, qwen2.5-7b, mistral-7b, "
                      "gemma-2-9b); repeatable");
  CLI::App* export_ = app.add_subcommand(
      "export",
      "write one bundle file of verified entries: --spec/--model (compiled into --dir "
      "when missing), else every current entry of --dir");
  export_->add_option("bundle", o.bundle, "the bundle file to write (a tar archive)")->required();
  CLI::App* import = app.add_subcommand(
      "import", "verify a bundle and install its entries into --dir (stale ones are reported)");
  import->add_option("bundle", o.bundle, "the bundle file to read")->required();
  import->add_flag("--dry-run", o.dry_run, "verify and report, install nothing");
  for (CLI::App* c : {compile, export_}) {
    c->add_option("--arch", o.archs, "with --model: target archs, e.g. 90 or 90,100 (default 90)")
        ->delimiter(',')
        ->check(CLI::Range(50, 1000));
    c->add_option("--block-size", o.block_size, "with --model: KV cache block size")
        ->capture_default_str();
    c->add_option("--dtype", o.dtype, "with --model: fp16 or bf16")->capture_default_str();
    c->add_option("--kv-cache-dtype", o.kv_dtype, "with --model: auto, e4m3 or e5m2")
        ->capture_default_str();
  }
  export_->add_option("--spec", o.specs, "a spec string; repeatable");
  export_->add_option("--model", o.models, "every kernel of a built-in model; repeatable");
  export_->add_option("--threads", o.threads, "compile threads (0: one per core)")
      ->check(CLI::Range(0u, 1024u));
  compile->add_option("--threads", o.threads, "compile threads (0: one per core)")
      ->check(CLI::Range(0u, 1024u));
  compile->add_flag("--dump-source", o.dump_source, "write each compiled source beside its entry");
  CLI::App* push = app.add_subcommand(
      "push", "store every verified entry of --dir in the remote cache (signed with a key)");
  CLI::App* pull =
      app.add_subcommand("pull", "install every verified value of the remote cache into --dir");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report_error(describe_parse_error(app, e, argc, argv), json_requested, kExitUsage,
                        app.help());
  }
  o.json = o.json || json_requested;
  if (o.archs.empty()) o.archs = {90};
  // The environment is checked before any command runs, like the arguments.
  try {
    graphattn::check_cache_environment();
  } catch (const std::exception& e) {
    return report_error(e.what(), o.json, kExitUsage, "");
  }
  if (const std::string p = graphattn::log_level_problem(); !p.empty())
    return report_error(p, o.json, kExitUsage, "");

  try {
    // stats and verify look at every layer the kernel cache searches, unless --dir names one.
    o.layers = {o.dir};
    if (dir_option->count() == 0) {
      const std::vector<std::string> layers = graphattn::cache_dirs_from_env();
      if (!layers.empty()) o.layers = layers;
    }
    if (list->parsed()) return cmd_list(o);
    if (show->parsed()) return cmd_show(o);
    if (verify->parsed()) return for_each_layer(o, cmd_verify);
    if (prune->parsed()) return cmd_prune(o);
    if (clear->parsed()) return cmd_clear(o);
    if (stats->parsed()) return for_each_layer(o, cmd_stats);
    if (compile->parsed()) return cmd_compile(o);
    if (push->parsed()) return cmd_push(o);
    if (pull->parsed()) return cmd_pull(o);
    if (export_->parsed()) return cmd_export(o);
    if (import->parsed()) return cmd_import(o);
    return report_error("no command given", o.json, kExitUsage, app.help());
  } catch (const UsageError& e) {
    return report_error(e.what(), o.json, kExitUsage, app.help());
  } catch (const std::exception& e) {
    return report_error(e.what(), o.json, kExitFailed, "");
  }
}
