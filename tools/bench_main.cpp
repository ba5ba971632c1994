// SPDX-License-Identifier: Apache-2.0
// graphattn-bench: the performance tables of graphattn on this GPU, each measured in one run
// with the device's own limits (read-only streaming and device-to-device copy bandwidth) and,
// where PyTorch is present, the peer (tools/peer_sdpa.py: cuDNN SDPA on contiguous tensors).
//
//   graphattn-bench [--parts decode,step,mixed,tp,capture,prefill] [--json OUT.json] [--peer-script
//   P]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "graphattn/graphattn.hpp"
#include "tools/bench_parts.hpp"
#include "tools/version.hpp"

using namespace graphattn;
using namespace graphattn::bench;

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "graphattn-bench: decode, the 32-layer step (also split over 2 GPUs), capture, prefill and "
      "cascade attention"};
  std::string parts_text = "decode,step,mixed,tp,capture,prefill,cascade";
  std::string legacy_variants_text =
      "4x4096,4x4096:w1024,4x4096:sinks,4x4096:fp16,4x4096:kv32,4x4096:kv4,4x4096:bs32,"
      "4x4096:nc,4x512+2048,4x512+16384";
  std::string shapes_text =
      "1x4096,1x32768,16x4096,64x2048,64x8192,256x1024,256x4096,64x8192:h64,64x8192:h256,"
      "64x8192:e4m3,64x8192:qe4m3,64x4096,64x4096:q4,64x8192:bsp,64x4096:legacy,8x32768,8x32768:"
      "legacy";
  std::string json_path, peer_script = "tools/peer_sdpa.py", try_splits_text;
  std::string mixed_shapes_text = "56x2048:512:2048";
  int reps = 100;
  bool check = true, use_peer = true;
  app.add_option("--parts", parts_text,
                 "comma-separated: decode, step, mixed, tp (2 GPUs), capture, prefill, cascade; "
                 "also legacy-variants, prefill-fp8 (the bf16 and e4m3 q+kv 4x4096 rows of "
                 "prefill alone) and prefill-bsp (a block-sparse layer's bf16 4x4096 prefill); "
                 "not in the default set")
      ->capture_default_str();
  app.add_option("--legacy-variants", legacy_variants_text,
                 "legacy-variants: forward_prefix head 128 rows "
                 "BATCHxLEN[+PREFIX][:fp16][:kvN][:bsN][:wN][:sinks][:nc], comma-separated")
      ->capture_default_str();
  app.add_option(
         "--shapes", shapes_text,
         "decode shapes BATCHxLEN[:hHEAD|:e4m3|:qe4m3|:qN|:bsp|:legacy|:kvN][:hnd][:seq|:near], "
         "comma-separated (:kvN: N KV heads, 4N query heads; :hnd: HND pages; :seq: pages in "
         "order, :near: shuffled within 2 MiB of K, instead of over the whole cache)")
      ->capture_default_str();
  app.add_option("--mixed-shapes", mixed_shapes_text,
                 "mixed steps DECODESxLEN:CHUNK:PREFIX (DECODES decodes at context LEN and one "
                 "CHUNK-token prefill over PREFIX tokens), comma-separated; the first is the "
                 "JSON's mixed_step, all are in mixed_steps")
      ->capture_default_str();
  bool mixed_host_only = false;
  app.add_flag("--mixed-host-only", mixed_host_only,
               "mixed: time only the eager step split on the host (no graph captured, nothing "
               "launched before it: for a profiler's launch count)");
  app.add_option("--reps", reps, "timed repetitions (median reported), >= 20")
      ->check(CLI::Range(20, 100000))
      ->capture_default_str();
  app.add_option("--json", json_path, "also write every table as one JSON document here");
  app.add_option("--peer-script", peer_script, "the peer timing script")->capture_default_str();
  app.add_flag("!--no-peer", use_peer, "do not run the peer");
  app.add_flag("!--no-check", check, "skip the float64 reference checks");
  bool flush_by_reading = false;
  app.add_flag("--flush-by-reading", flush_by_reading,
               "evict L2 before each timed repetition by reading twice its size instead of "
               "writing it (no dirty lines left for the timed work to write back)");
  std::string cascade_prefixes_text = "8192";
  std::string cascade_requests_text = "64";
  int cascade_own = 512;
  app.add_option("--cascade-prefixes", cascade_prefixes_text,
                 "cascade: shared prompt lengths (multiples of 16), e.g. 256,1024,2048,4096,8192")
      ->capture_default_str();
  app.add_option("--cascade-requests", cascade_requests_text,
                 "cascade: decoding requests (1..4096), comma-separated for a sweep: one table "
                 "per count, e.g. 8,16,32,64,128,256")
      ->capture_default_str();
  app.add_option("--cascade-own", cascade_own, "cascade: each request's own tokens")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--try-splits", try_splits_text,
                 "decode: also time the kernels alone at these max_splits, e.g. 1,4,16,64");
  bool paged_read = false;
  app.add_flag("--paged-read", paged_read,
               "decode: after each flash NHD single-token row, the same pages read by the "
               "bench's paged_read helper (the decode's grid and blocks a multiprocessor, loads "
               "only), then again with each request's pages in ascending address order");
  bool read_latency = false;
  app.add_flag("--read-latency", read_latency,
               "decode: after each row, its latency floors after the same flush: an empty "
               "kernel's graph replay (1 block, one a multiprocessor) and the row's bytes read by "
               "kernels built for latency (every multiprocessor, each thread's 16-byte loads all "
               "in flight at once; on sm_90 also bulk copies into shared memory)");
  int try_chain = 0;
  app.add_option("--try-chain", try_chain,
                 "decode, with --try-splits: also time N launches back to back in one graph, each "
                 "over its own KV cache with the fused cache write (as the step's layers), per "
                 "launch, and the floor: the same chain of plain reads of the row's bytes under "
                 "programmatic dependent launch (waiting first / last); shapes whose N caches "
                 "pass 16 GiB are skipped")
      ->check(CLI::Range(0, 64));
  int block_timing = 0;
  app.add_option("--block-timing", block_timing,
                 "decode: after each flash single-token row, N graph replays with the decode "
                 "kernel's per-block timing records summarized (ramp, waves, tail, per SM); needs "
                 "GRAPHATTN_NVRTC_EXTRA_OPTIONS=-DGA_DECODE_TIMING=1")
      ->check(CLI::Range(0, 100));
  std::string block_timing_out;
  app.add_option("--block-timing-out", block_timing_out,
                 "with --block-timing: also write each replay's raw records (64 uint64 a block) to "
                 "PREFIX<row>-rN.u64");
  app.set_version_flag("--version", graphattn::tools::version_text("graphattn-bench"),
                       "print the tool's, the library's and NVRTC's versions and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    const std::vector<std::string> parts = split_list(parts_text);
    const std::set<std::string> known = {"decode",      "step",       "mixed",   "tp",
                                         "capture",     "prefill",    "cascade", "legacy-variants",
                                         "prefill-fp8", "prefill-bsp"};
    for (const auto& p : parts)
      if (!known.count(p))
        throw Error("unknown part '" + p +
                    "'; parts: decode, step, mixed, tp, capture, prefill, cascade, "
                    "legacy-variants, prefill-fp8, prefill-bsp");
    std::vector<int> cascade_prefixes;
    for (const auto& s : split_list(cascade_prefixes_text)) {
      const int v = std::stoi(s);
      if (v < 16 || v % 16 != 0)
        throw Error("--cascade-prefixes: " + s + " is not a positive multiple of 16");
      cascade_prefixes.push_back(v);
    }
    std::vector<int> cascade_requests;
    for (const auto& s : split_list(cascade_requests_text)) {
      const int v = std::stoi(s);
      if (v < 1 || v > 4096) throw Error("--cascade-requests: " + s + " is not in 1..4096");
      cascade_requests.push_back(v);
    }
    struct MixedShape {
      int decodes, len, chunk, prefix;
    };
    std::vector<MixedShape> mixed_shapes;
    for (const auto& s : split_list(mixed_shapes_text)) {
      MixedShape m{};
      char x = 0, c1 = 0, c2 = 0, extra = 0;
      if (std::sscanf(s.c_str(), "%d%c%d%c%d%c%d%c", &m.decodes, &x, &m.len, &c1, &m.chunk, &c2,
                      &m.prefix, &extra) != 7 ||
          x != 'x' || c1 != ':' || c2 != ':' || m.decodes < 0 || m.decodes > 63 || m.len < 1 ||
          m.chunk < 2 || m.prefix < 0)
        throw Error("--mixed-shapes: '" + s +
                    "' is not DECODESxLEN:CHUNK:PREFIX with DECODES in 0..63 (the step's 64 "
                    "request slots hold the prefill too), LEN >= 1, CHUNK >= 2, PREFIX >= 0");
      mixed_shapes.push_back(m);
    }
    if (mixed_shapes.empty()) throw Error("--mixed-shapes: no shape given");
    auto wants = [&](const char* p) {
      return std::find(parts.begin(), parts.end(), p) != parts.end();
    };
    if (wants("legacy-variants")) check_legacy_variant_names(split_list(legacy_variants_text));
    DecodeOptions dopt;
    dopt.shapes = parse_decode_shapes(shapes_text);
    dopt.reps = reps;
    dopt.check = check;
    for (const auto& s : split_list(try_splits_text)) dopt.try_splits.push_back(std::stoi(s));
    dopt.chain = try_chain;
    dopt.paged_read = paged_read;
    dopt.read_latency = read_latency;
    dopt.block_timing = block_timing;
    dopt.block_timing_out = block_timing_out;

    Device dev = open_device();
    dev.flush_by_reading = flush_by_reading;
    std::printf("device: %s, %d SMs, L2 %d MiB, sm_%d\n", dev.name.c_str(), dev.sms,
                dev.l2_bytes >> 20, dev.arch);
    std::printf(
        "limits measured now: read-only streaming %.0f GB/s; device-to-device copy "
        "(read + write) %.0f GB/s\n",
        dev.read_gbs, dev.copy_gbs);
    std::printf("L2 flush before each timed repetition: %s\n",
                flush_by_reading ? "reading twice its size (--flush-by-reading)"
                                 : "writing twice its size");
    PeerTimes peer;
    if (use_peer && (wants("decode") || wants("prefill") || wants("prefill-fp8"))) {
      std::vector<std::string> dk, pk;
      if (wants("decode"))
        for (const auto& s : dopt.shapes)
          if (!s.peer_key().empty()) dk.push_back(s.peer_key());
      if (wants("prefill"))
        pk = {"4:4096:128", "4:4096:64", "4:4096:256"};
      else if (wants("prefill-fp8"))
        pk = {"4:4096:128"};  // the bf16 and fp8 peers of the fp8 part's two rows
      const std::string out =
          json_path.empty() ? "/tmp/graphattn-peer.json" : json_path + ".peer.json";
      peer = run_peer(peer_script, out, dk, pk);
      std::printf("peer: %s\n",
                  peer.available ? ("PyTorch SDPA, " + peer.backend).c_str() : peer.why.c_str());
    } else {
      peer.why = "not run (--no-peer)";
    }
    bool ok = true;
    nlohmann::json j = {{"device", dev.name},
                        {"sms", dev.sms},
                        {"read_only_gb_per_s", dev.read_gbs},
                        {"d2d_copy_gb_per_s", dev.copy_gbs},
                        {"reps", reps},
                        {"l2_flush", flush_by_reading ? "read" : "write"},
                        {"peer", peer.available ? peer.backend : "unavailable: " + peer.why}};
    if (wants("decode")) j["decode"] = bench_decode(dev, dopt, peer, &ok);
    if (wants("step")) j["step"] = bench_step(dev, {1, 64}, 1024, reps);
    if (wants("mixed")) {
      for (const MixedShape& m : mixed_shapes)
        j["mixed_steps"].push_back(
            bench_mixed_step(dev, m.decodes, m.len, m.chunk, m.prefix, reps, mixed_host_only));
      j["mixed_step"] = j["mixed_steps"][0];
    }
    if (wants("tp")) j["tensor_parallel"] = bench_tensor_parallel(dev, {1, 64}, 1024, reps);
    if (wants("capture")) j["capture"] = bench_capture(dev, 256);
    // prefill-fp8 alone: only the bf16 and e4m3 4x4096 rows.
    if (wants("prefill") || wants("prefill-fp8")) {
      const bool all = wants("prefill");
      j["prefill"] = bench_prefill(dev, 4, 4096, std::max(20, reps / 5), peer, &ok);
      if (all)
        j["prefill_legacy"] = bench_prefill(dev, 4, 4096, std::max(20, reps / 5), peer, &ok, true);
      j["prefill_fp8"] =
          bench_prefill(dev, 4, 4096, std::max(20, reps / 5), peer, &ok, false, true);
      const double speedup =
          j["prefill"]["time_us"].get<double>() / j["prefill_fp8"]["time_us"].get<double>();
      j["prefill_fp8"]["speedup_over_bf16"] = speedup;
      std::printf("prefill 4x4096: e4m3 q+kv is %.2fx the bf16 prefill's throughput\n", speedup);
      // Head sizes 64 and 256: the same causal bf16 prefill and its peer.
      for (int head : all ? std::vector<int>{64, 256} : std::vector<int>{})
        j["prefill_heads"].push_back(
            bench_prefill(dev, 4, 4096, std::max(20, reps / 5), peer, &ok, false, false, 0, head));
      // Chunked prefill: 512 new tokens over a cached prefix, flash and legacy caches.
      for (int prefix : all ? std::vector<int>{2048, 8192, 16384} : std::vector<int>{})
        for (bool legacy : {false, true})
          j["prefill_chunked"].push_back(
              bench_prefill(dev, 4, 512, std::max(20, reps / 5), peer, &ok, legacy, false, prefix));
    }
    // prefill-bsp: the block-sparse layer's bf16 4x4096 prefill (not in the default set).
    if (wants("prefill-bsp"))
      j["prefill_bsp"] = bench_prefill(dev, 4, 4096, std::max(20, reps / 5), peer, &ok, false,
                                       false, 0, 128, true);
    if (wants("legacy-variants"))
      j["legacy_variants"] =
          bench_legacy_variants(dev, split_list(legacy_variants_text), std::max(20, reps / 5), &ok);
    if (wants("cascade")) {
      j["cascade"] = nlohmann::json::array();
      for (int n : cascade_requests)
        for (auto& row : bench_cascade(dev, n, cascade_own, cascade_prefixes, reps, &ok))
          j["cascade"].push_back(row);
    }
    if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
    if (!ok) {
      std::fprintf(stderr, "graphattn-bench: a reference check failed (see FAIL above)\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graphattn-bench: %s\n", e.what());
    return 1;
  }
}
