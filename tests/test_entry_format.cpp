// SPDX-License-Identifier: Apache-2.0
// The disk entry format (jit_cache/entry_format.hpp), pinned by a golden file. The file,
// tests/data/golden_entry.gakc, was written byte by byte from the layout comment, not by
// encode_entry: a change of layout, field order, checksum or magic fails these tests. Such a
// change needs a new kCacheFormatVersion and a new golden file, never an edited one.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "jit_cache/entry_format.hpp"

#ifndef GRAPHATTN_TEST_DATA_DIR
#error "GRAPHATTN_TEST_DATA_DIR must name tests/data (see tests/tests.cmake)"
#endif

using namespace graphattn;
using detail::EntryStatus;
using detail::FileKind;

namespace {

std::vector<char> read_golden() {
  const std::string path = std::string(GRAPHATTN_TEST_DATA_DIR) + "/golden_entry.gakc";
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open " << path);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

const CacheKey kGoldenKey{0x0123456789abcdefull, 0xfedcba9876543210ull};
const char* const kGoldenSpec = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";

// A key-named file of each kind, for the classifier.
const std::string kHex = "0123456789abcdeffedcba9876543210";

FileKind kind_of(const std::string& name, std::string* key_hex = nullptr) {
  std::string ignored;
  FileKind k = detail::classify_file_name(name, key_hex ? key_hex : &ignored);
  CHECK(detail::classify_file_name(name, nullptr) == k);
  return k;
}

}  // namespace

TEST_CASE("entry format: the golden file decodes to the expected header and payload") {
  const std::vector<char> image = read_golden();
  REQUIRE(image.size() == 206);
  detail::EntryHeader h;
  std::vector<char> payload;
  std::string why;
  REQUIRE_MESSAGE(detail::decode_entry(image, &kGoldenKey, &h, &payload, &why) == EntryStatus::kOk,
                  why);
  CHECK(h.format_version == 1);
  CHECK(h.key.high == 0x0123456789abcdefull);
  CHECK(h.key.low == 0xfedcba9876543210ull);
  CHECK(h.key.hex() == "0123456789abcdeffedcba9876543210");
  CHECK(h.arch == 90);
  CHECK(h.nvrtc_major == 13);
  CHECK(h.nvrtc_minor == 0);
  CHECK(h.compiled_at_ms == 1767225600000);  // 2026-01-01T00:00:00Z
  CHECK(h.compile_us == 123456);
  CHECK(h.payload_bytes == 64);
  CHECK(h.payload_hash == 0x3c0768c3735d601eull);
  CHECK(h.spec == kGoldenSpec);
  // The payload: a bare ELF header of a cubin for sm_90, the least that check_cubin accepts.
  REQUIRE(payload.size() == 64);
  CHECK(std::string(payload.data(), 4) ==
        "\x7f"
        "ELF");
  CHECK(std::vector<char>(payload.begin(), payload.end()) ==
        std::vector<char>(image.end() - 64, image.end()));

  // The fixed header alone is enough to check the lengths against the file's size.
  uint32_t header_bytes = 0;
  CHECK(detail::check_entry_prefix(image.data(), detail::kMaxHeaderBytes, image.size(),
                                   &header_bytes, &why) == EntryStatus::kOk);
  CHECK(header_bytes == 142);
  CHECK(header_bytes == detail::kFixedHeaderBytes + h.spec.size() + 8);
}

TEST_CASE("entry format: re-encoding the golden entry gives the file byte for byte") {
  const std::vector<char> image = read_golden();
  detail::EntryHeader h;
  std::vector<char> payload;
  std::string why;
  REQUIRE_MESSAGE(detail::decode_entry(image, nullptr, &h, &payload, &why) == EntryStatus::kOk,
                  why);
  const std::vector<char> again = detail::encode_entry(h, payload);
  REQUIRE(again.size() == image.size());
  for (size_t i = 0; i < image.size(); ++i) {
    INFO("byte " << i);
    CHECK(again[i] == image[i]);
  }
}

TEST_CASE("entry format: every changed byte of the golden entry is refused") {
  const std::vector<char> image = read_golden();
  for (size_t i = 0; i < image.size(); ++i) {
    std::vector<char> bad = image;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    INFO("byte " << i);
    CHECK(detail::decode_entry(bad, &kGoldenKey, nullptr, nullptr, nullptr) != EntryStatus::kOk);
  }
  std::vector<char> longer = image;
  longer.push_back(0);
  CHECK(detail::decode_entry(longer, nullptr, nullptr, nullptr, nullptr) ==
        EntryStatus::kBadHeader);
  const CacheKey other{kGoldenKey.high, kGoldenKey.low + 1};
  CHECK(detail::decode_entry(image, &other, nullptr, nullptr, nullptr) ==
        EntryStatus::kKeyMismatch);
}

TEST_CASE("entry format: the names of a key's files") {
  CHECK(detail::entry_file_name(kGoldenKey) == kHex + ".gakc");
  CHECK(detail::lock_file_name(kGoldenKey) == kHex + ".lock");
  CHECK(detail::source_file_name(kGoldenKey) == kHex + ".cu");
  CHECK(detail::temp_file_name(kGoldenKey, detail::TempOf::kEntry, "00ff") ==
        "." + kHex + ".tmp.00ff");
  CHECK(detail::temp_file_name(kGoldenKey, detail::TempOf::kSource, "00ff") ==
        "." + kHex + ".cu.tmp.00ff");
  CHECK(detail::probe_file_name("00ff") == ".probe.00ff");
  CHECK(detail::entry_stem(kHex + ".gakc") == kHex);
  CHECK(detail::entry_stem("notes.txt") == "notes.txt");
  CHECK(detail::lock_file_of(kHex + ".gakc") == kHex + ".lock");
  CHECK(detail::source_file_of("misnamed.gakc") == "misnamed.cu");
  CHECK(detail::is_key_hex(kHex));
  CHECK(detail::key_from_hex(kHex) == kGoldenKey);
  CHECK(detail::key_from_hex(std::string(32, 'f')).hex() == std::string(32, 'f'));
}

TEST_CASE("entry format: classify_file_name") {
  std::string key;
  // Each kind, with the key it carries.
  CHECK(kind_of(kHex + ".gakc", &key) == FileKind::kEntry);
  CHECK(key == kHex);
  CHECK(kind_of(kHex + ".lock", &key) == FileKind::kLock);
  CHECK(key == kHex);
  CHECK(kind_of(kHex + ".cu", &key) == FileKind::kSource);
  CHECK(key == kHex);
  CHECK(kind_of("." + kHex + ".tmp.1234abcd", &key) == FileKind::kTemp);
  CHECK(key.empty());
  CHECK(kind_of("." + kHex + ".cu.tmp.1234abcd") == FileKind::kTemp);
  CHECK(kind_of(".anything.tmp.x") == FileKind::kTemp);
  CHECK(kind_of(".probe.1234abcd", &key) == FileKind::kProbe);
  CHECK(key.empty());
  CHECK(kind_of(".probe.tmp.1") == FileKind::kTemp);  // a temp first, as the tier removes it
  CHECK(kind_of("notes.txt", &key) == FileKind::kOther);
  CHECK(key.empty());
  // Every name the builders make is classified as what it is.
  CHECK(kind_of(detail::entry_file_name(kGoldenKey)) == FileKind::kEntry);
  CHECK(kind_of(detail::lock_file_name(kGoldenKey)) == FileKind::kLock);
  CHECK(kind_of(detail::source_file_name(kGoldenKey)) == FileKind::kSource);
  CHECK(kind_of(detail::temp_file_name(kGoldenKey, detail::TempOf::kEntry, "1")) ==
        FileKind::kTemp);
  CHECK(kind_of(detail::temp_file_name(kGoldenKey, detail::TempOf::kSource, "1")) ==
        FileKind::kTemp);
  CHECK(kind_of(detail::probe_file_name("1")) == FileKind::kProbe);

  // Near misses. Named like an entry but not under a key: still listed, and reported as bad.
  CHECK(kind_of(kHex.substr(1) + ".gakc", &key) == FileKind::kMisnamedEntry);  // 31 digits
  CHECK(key.empty());
  CHECK(kind_of(kHex + "0.gakc") == FileKind::kMisnamedEntry);  // 33 digits
  CHECK(kind_of("0123456789ABCDEFFEDCBA9876543210.gakc") == FileKind::kMisnamedEntry);
  CHECK(kind_of("0123456789abcdeffedcba987654321g.gakc") == FileKind::kMisnamedEntry);
  CHECK(kind_of(".gakc") == FileKind::kOther);
  CHECK(kind_of("." + kHex + ".gakc") == FileKind::kOther);
  // Side files need a key.
  CHECK(kind_of(kHex.substr(1) + ".lock") == FileKind::kOther);
  CHECK(kind_of("0123456789ABCDEFFEDCBA9876543210.lock") == FileKind::kOther);
  CHECK(kind_of(kHex + "0.cu") == FileKind::kOther);
  CHECK(kind_of("0123456789ABCDEFFEDCBA9876543210.cu") == FileKind::kOther);
  // Missing or longer suffixes.
  CHECK(kind_of(kHex) == FileKind::kOther);
  CHECK(kind_of(kHex + ".gak") == FileKind::kOther);
  CHECK(kind_of(kHex + ".gakc.bak") == FileKind::kOther);
  CHECK(kind_of(kHex + ".lck") == FileKind::kOther);
  CHECK(kind_of(kHex + ".cuh") == FileKind::kOther);
  // Temp and probe names start with a dot.
  CHECK(kind_of(kHex + ".tmp.1") == FileKind::kOther);
  CHECK(kind_of("probe.1") == FileKind::kOther);
  CHECK(kind_of(".probe") == FileKind::kOther);
  CHECK(kind_of("") == FileKind::kOther);
  CHECK(!detail::is_key_hex(kHex.substr(1)));
  CHECK(!detail::is_key_hex("0123456789ABCDEFFEDCBA9876543210"));
}
