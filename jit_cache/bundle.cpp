// SPDX-License-Identifier: Apache-2.0
// Kernel bundles (jit_cache/bundle.hpp): a ustar writer and a strict reader, the manifest and
// its signature, and the verdict on each entry.
#include "jit_cache/bundle.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "graphattn/spec.hpp"
#include "jit_cache/disk_tier.hpp"
#include "jit_cache/sha256.hpp"

namespace graphattn::detail {

namespace {

constexpr size_t kBlock = 512;
constexpr const char* kManifestName = "manifest.txt";
constexpr const char* kHeaderLine = "graphattn-kernel-bundle 1";

// ---------------------------------------------------------------------------------------------
// ustar

void put_octal(char* field, size_t width, uint64_t value) {
  // width - 1 digits and a NUL, as POSIX writes numeric fields.
  std::string digits(width - 1, '0');
  for (size_t i = width - 1; i-- > 0 && value;) {
    digits[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  std::memcpy(field, digits.data(), width - 1);
  field[width - 1] = '\0';
}

uint32_t header_checksum(const char* h) {
  uint32_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i)
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
  return sum;
}

void append_member(std::string* out, const std::string& name, const char* data, size_t size,
                   int64_t mtime_s) {
  char h[kBlock] = {};
  std::memcpy(h, name.data(), name.size());  // names are short: checked by the callers
  put_octal(h + 100, 8, 0644);
  put_octal(h + 108, 8, 0);
  put_octal(h + 116, 8, 0);
  put_octal(h + 124, 12, size);
  put_octal(h + 136, 12, static_cast<uint64_t>(std::max<int64_t>(0, mtime_s)));
  h[156] = '0';
  std::memcpy(h + 257, "ustar", 6);  // with its NUL
  std::memcpy(h + 263, "00", 2);
  put_octal(h + 148, 7, header_checksum(h));  // six digits, NUL, then the space below
  h[155] = ' ';
  out->append(h, kBlock);
  out->append(data, size);
  out->append((kBlock - size % kBlock) % kBlock, '\0');
}

// A numeric field: octal digits, optionally led by spaces and ended by NUL or space.
bool parse_octal(const char* field, size_t width, uint64_t* value) {
  size_t i = 0;
  while (i < width && field[i] == ' ') ++i;
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i, ++digits) {
    if (v >> 60) return false;
    v = v * 8 + static_cast<uint64_t>(field[i] - '0');
  }
  for (; i < width; ++i)
    if (field[i] != '\0' && field[i] != ' ') return false;
  *value = v;
  return digits > 0;
}

struct Member {
  std::string name;
  std::string data;
};

// Where an archive's bytes come from: read() fills up to n bytes and returns how many (0 at the
// end); throws std::runtime_error when the bytes cannot be read.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual size_t read(char* out, size_t n) = 0;
};

class MemorySource : public ByteSource {
 public:
  explicit MemorySource(const std::string& bytes) : bytes_(bytes) {}
  size_t read(char* out, size_t n) override {
    const size_t k = std::min(n, bytes_.size() - at_);
    std::memcpy(out, bytes_.data() + at_, k);
    at_ += k;
    return k;
  }

 private:
  const std::string& bytes_;
  size_t at_ = 0;
};

class FileSource : public ByteSource {
 public:
  explicit FileSource(int fd) : fd_(fd) {}
  size_t read(char* out, size_t n) override {
    while (true) {
      const ssize_t got = ::read(fd_, out, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) throw std::runtime_error(std::string("read: ") + std::strerror(errno));
    }
  }

 private:
  int fd_;
};

// The members of a ustar archive, read one at a time: regular files with plain names only, each
// member's declared size checked against what it may hold before its bytes are read. Throws a
// message.
class TarReader {
 public:
  explicit TarReader(ByteSource& in) : in_(in) {}

  // The next member, or false at the end of the archive (a zero block, or the end of the bytes).
  // A member may hold at most max_bytes.
  bool next(Member* m, uint64_t max_bytes, const char* what) {
    char h[kBlock];
    const size_t got = read_up_to(h, kBlock);
    if (got == 0) return false;
    if (got < kBlock)
      throw std::runtime_error("truncated archive (a header block is cut off at byte " +
                               std::to_string(at_ - got) + ")");
    const uint64_t header_at = at_ - kBlock;
    if (std::all_of(h, h + kBlock, [](char c) { return c == '\0'; })) return false;
    uint64_t sum = 0, size = 0;
    if (!parse_octal(h + 148, 8, &sum) || sum != header_checksum(h))
      throw std::runtime_error("not a tar archive, or a damaged header at byte " +
                               std::to_string(header_at) + " (header checksum)");
    if (std::memcmp(h + 257, "ustar", 5) != 0)
      throw std::runtime_error("not a ustar archive (header at byte " + std::to_string(header_at) +
                               ")");
    const size_t name_len = strnlen(h, 100);
    m->name.assign(h, name_len);
    if (h[345] != '\0')
      throw std::runtime_error("member '" + printable(m->name) + "' has a path prefix");
    if (h[156] != '0' && h[156] != '\0')
      throw std::runtime_error("member '" + printable(m->name) + "' is not a regular file (type '" +
                               printable(std::string(1, h[156])) + "')");
    if (!parse_octal(h + 124, 12, &size))
      throw std::runtime_error("member '" + printable(m->name) + "' has a malformed size");
    if (size > max_bytes)
      throw std::runtime_error("member '" + printable(m->name) + "' declares " +
                               std::to_string(size) + " bytes, more than " + what + " may hold (" +
                               std::to_string(max_bytes) + ")");
    m->data.resize(static_cast<size_t>(size));
    const size_t data_got = read_up_to(m->data.data(), m->data.size());
    if (data_got != size)
      throw std::runtime_error("member '" + printable(m->name) + "' is truncated (" +
                               std::to_string(size) + " bytes declared, " +
                               std::to_string(data_got) + " left)");
    char pad[kBlock];
    read_up_to(pad, (kBlock - size % kBlock) % kBlock);  // a missing pad at the end is tolerated
    return true;
  }

 private:
  size_t read_up_to(char* out, size_t n) {
    size_t done = 0;
    while (done < n) {
      const size_t k = in_.read(out + done, n - done);
      if (k == 0) break;
      done += k;
    }
    at_ += done;
    return done;
  }
  ByteSource& in_;
  uint64_t at_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The manifest

struct ManifestLine {
  std::string key_hex;
  uint32_t arch = 0;
  uint64_t bytes = 0;
  std::string sha256_hex;
  std::string spec;
};

std::string manifest_body(const std::vector<BundleEntry>& entries,
                          const std::vector<std::string>& images, int64_t created_ms) {
  const auto [major, minor] = nvrtc_version();
  std::ostringstream m;
  m << kHeaderLine << "\n"
    << "cache-format " << kCacheFormatVersion << "\n"
    << "nvrtc " << major << "." << minor << "\n"
    << "created " << created_ms << "\n";
  for (size_t i = 0; i < entries.size(); ++i) {
    const EntryHeader& h = entries[i].header;
    m << "entry " << h.key.hex() << " " << h.arch << " " << images[i].size() << " "
      << hex_of(sha256(images[i].data(), images[i].size())) << " " << h.spec << "\n";
  }
  return m.str();
}

std::string signature_of(const std::string& key, const std::string& body) {
  return hex_of(hmac_sha256(key, {"graphattn-kernel-bundle", body}));
}

bool parse_uint(const std::string& s, uint64_t max, uint64_t* v) {
  if (s.empty() || s.size() > 20 || !std::all_of(s.begin(), s.end(), ::isdigit)) return false;
  errno = 0;
  const unsigned long long x = std::strtoull(s.c_str(), nullptr, 10);
  if (errno != 0 || x > max) return false;
  *v = x;
  return true;
}

bool is_lower_hex(const std::string& s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  size_t at = 0;
  while (true) {
    const size_t sp = line.find(' ', at);
    w.push_back(line.substr(at, sp == std::string::npos ? std::string::npos : sp - at));
    if (sp == std::string::npos) return w;
    at = sp + 1;
  }
}

// Parses the manifest (signature checked) into `bundle` and the entry lines.
std::vector<ManifestLine> parse_manifest(const std::string& text, const std::string& signing_key,
                                         Bundle* bundle) {
  if (text.size() > kMaxBundleManifestBytes)
    throw std::runtime_error("the manifest is larger than " +
                             std::to_string(kMaxBundleManifestBytes) + " bytes");
  if (text.empty() || text.back() != '\n')
    throw std::runtime_error("the manifest does not end with a newline");
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  auto fail = [&](size_t i, const std::string& what) {
    return std::runtime_error("manifest line " + std::to_string(i + 1) + " ('" +
                              printable(lines[i], 120) + "'): " + what);
  };
  if (lines[0] != kHeaderLine)
    throw std::runtime_error("the manifest does not start with '" + std::string(kHeaderLine) +
                             "' (found '" + printable(lines[0], 120) + "')");
  // The signature, when present, is the last line and covers every byte before it.
  size_t body_lines = lines.size();
  if (lines.back().rfind("signature ", 0) == 0) {
    --body_lines;
    bundle->signed_ = true;
  }
  const std::string body =
      text.substr(0, text.size() - (bundle->signed_ ? lines.back().size() + 1 : 0));
  if (!signing_key.empty()) {
    if (!bundle->signed_)
      throw std::runtime_error("the bundle is not signed, and a signing key is configured");
    const std::string tag = words(lines.back()).back();
    if (!is_lower_hex(tag, 64) || tag != signature_of(signing_key, body))
      throw std::runtime_error("the bundle's signature does not match the signing key");
  }
  std::vector<ManifestLine> entries;
  std::set<std::string> keys;
  bool have_format = false, have_nvrtc = false, have_created = false;
  for (size_t i = 1; i < body_lines; ++i) {
    const std::vector<std::string> w = words(lines[i]);
    uint64_t v = 0;
    if (w[0] == "cache-format" && w.size() == 2 && !have_format) {
      if (!parse_uint(w[1], UINT32_MAX, &v)) throw fail(i, "not a number");
      bundle->cache_format = static_cast<uint32_t>(v);
      have_format = true;
    } else if (w[0] == "nvrtc" && w.size() == 2 && !have_nvrtc) {
      const size_t dot = w[1].find('.');
      uint64_t major = 0, minor = 0;
      if (dot == std::string::npos || !parse_uint(w[1].substr(0, dot), 1000, &major) ||
          !parse_uint(w[1].substr(dot + 1), 1000, &minor))
        throw fail(i, "expected nvrtc MAJOR.MINOR");
      bundle->nvrtc_major = static_cast<int>(major);
      bundle->nvrtc_minor = static_cast<int>(minor);
      have_nvrtc = true;
    } else if (w[0] == "created" && w.size() == 2 && !have_created) {
      if (!parse_uint(w[1], INT64_MAX, &v)) throw fail(i, "not a number");
      bundle->created_ms = static_cast<int64_t>(v);
      have_created = true;
    } else if (w[0] == "entry" && w.size() == 6) {
      ManifestLine e;
      uint64_t arch = 0;
      e.key_hex = w[1];
      e.sha256_hex = w[4];
      e.spec = w[5];
      if (!is_key_hex(e.key_hex)) throw fail(i, "the key is not 32 lower-case hex digits");
      if (!parse_uint(w[2], 10000, &arch)) throw fail(i, "the arch is not a number");
      if (!parse_uint(w[3], kMaxHeaderBytes + kMaxPayloadBytes, &e.bytes))
        throw fail(i, "the size is not a number of at most " +
                          std::to_string(kMaxHeaderBytes + kMaxPayloadBytes));
      if (!is_lower_hex(e.sha256_hex, 64)) throw fail(i, "the SHA-256 is not 64 hex digits");
      if (e.spec.empty() || e.spec.size() > kMaxSpecBytes) throw fail(i, "bad spec length");
      if (!keys.insert(e.key_hex).second) throw fail(i, "the key is listed twice");
      if (entries.size() >= kMaxBundleEntries)
        throw fail(i, "more than " + std::to_string(kMaxBundleEntries) + " entries");
      e.arch = static_cast<uint32_t>(arch);
      entries.push_back(std::move(e));
    } else {
      throw fail(i, "not a line this version understands (or given twice)");
    }
  }
  if (!have_format || !have_nvrtc || !have_created)
    throw std::runtime_error("the manifest lacks its cache-format, nvrtc or created line");
  return entries;
}

// The verdict on one member against its manifest line.
BundleMember judge(const ManifestLine& line, const Member& m) {
  BundleMember out;
  out.key_hex = line.key_hex;
  out.spec = line.spec;
  out.arch = line.arch;
  auto bad = [&](const std::string& why) {
    out.verdict = BundleMember::Verdict::kBad;
    out.reason = why;
    return out;
  };
  if (m.data.size() != line.bytes)
    return bad("size " + std::to_string(m.data.size()) + " differs from the manifest's " +
               std::to_string(line.bytes));
  if (hex_of(sha256(m.data.data(), m.data.size())) != line.sha256_hex)
    return bad("SHA-256 differs from the manifest's");
  const std::vector<char> image(m.data.begin(), m.data.end());
  const CacheKey key = key_from_hex(line.key_hex);
  std::string why;
  const EntryStatus s = decode_entry(image, &key, &out.entry.header, &out.entry.payload, &why);
  if (s != EntryStatus::kOk) return bad(std::string(to_string(s)) + ": " + why);
  const EntryHeader& h = out.entry.header;
  if (h.spec != line.spec || h.arch != line.arch)
    return bad("the entry's spec or arch differs from the manifest's");
  AttentionSpec spec;
  try {
    spec = AttentionSpec::parse(h.spec);
  } catch (const std::exception& e) {
    out.verdict = BundleMember::Verdict::kStale;
    out.reason = std::string("a spec this version cannot build: ") + e.what();
    return out;
  }
  if (static_cast<uint32_t>(spec.arch) != h.arch)
    return bad("the spec names sm_" + std::to_string(spec.arch) + ", the entry sm_" +
               std::to_string(h.arch));
  const auto [major, minor] = nvrtc_version();
  if (static_cast<int>(h.nvrtc_major) != major || static_cast<int>(h.nvrtc_minor) != minor) {
    out.verdict = BundleMember::Verdict::kStale;
    out.reason = "compiled by NVRTC " + std::to_string(h.nvrtc_major) + "." +
                 std::to_string(h.nvrtc_minor) + ", this process has " + std::to_string(major) +
                 "." + std::to_string(minor);
    return out;
  }
  if (kernel_key(render_kernel(spec), spec.arch) != h.key) {
    out.verdict = BundleMember::Verdict::kStale;
    out.reason = "compiled from other template text (another graphattn version)";
    return out;
  }
  out.verdict = BundleMember::Verdict::kOk;
  return out;
}

}  // namespace

const char* to_string(BundleMember::Verdict v) {
  static const char* const kNames[] = {"ok", "stale", "bad"};
  return enum_name(v, kNames);
}

void write_bundle(const std::string& path, const std::vector<BundleEntry>& entries,
                  const std::string& signing_key, int64_t created_ms) {
  std::vector<std::string> images;
  images.reserve(entries.size());
  for (const BundleEntry& e : entries) {
    const std::vector<char> img = encode_entry(e.header, e.payload);
    images.emplace_back(img.begin(), img.end());
  }
  std::string manifest = manifest_body(entries, images, created_ms);
  if (!signing_key.empty()) manifest += "signature " + signature_of(signing_key, manifest) + "\n";
  std::string tar;
  const int64_t mtime = created_ms / 1000;
  append_member(&tar, kManifestName, manifest.data(), manifest.size(), mtime);
  for (size_t i = 0; i < entries.size(); ++i)
    append_member(&tar, entry_file_name(entries[i].header.key), images[i].data(), images[i].size(),
                  mtime);
  tar.append(2 * kBlock, '\0');

  const std::string shown = printable(path, 4096);
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string temp = dir + ".bundle.tmp." + random_hex();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    throw Error("cannot write the bundle " + shown + ": " + std::strerror(errno) + " (creating " +
                printable(temp, 4096) + ")");
  bool ok = ::fchmod(fd, 0644) == 0;
  for (size_t done = 0; ok && done < tar.size();) {
    const ssize_t n = ::write(fd, tar.data() + done, tar.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  const int err = errno;
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlink(temp.c_str());
    throw Error("cannot write the bundle " + shown + ": " + std::strerror(e));
  }
}

namespace {

Bundle parse_from(ByteSource& in, const std::string& signing_key, const std::string& name) {
  const std::string shown = printable(name, 4096);
  Bundle bundle;
  try {
    TarReader tar(in);
    Member m;
    if (!tar.next(&m, kMaxBundleManifestBytes, "a manifest"))
      throw std::runtime_error("the archive is empty");
    if (m.name != kManifestName)
      throw std::runtime_error("the first member is '" + printable(m.name) + "', not " +
                               kManifestName);
    const std::vector<ManifestLine> lines = parse_manifest(m.data, signing_key, &bundle);
    for (const ManifestLine& line : lines) {
      if (!tar.next(&m, kMaxHeaderBytes + kMaxPayloadBytes, "an entry"))
        throw std::runtime_error("the member of " + line.key_hex +
                                 " that the manifest lists is missing");
      const std::string want = line.key_hex + ".gakc";
      if (m.name != want)
        throw std::runtime_error("member '" + printable(m.name) + "' where the manifest lists " +
                                 want);
      bundle.members.push_back(judge(line, m));
    }
    if (tar.next(&m, kMaxHeaderBytes + kMaxPayloadBytes, "an entry"))
      throw std::runtime_error("member '" + printable(m.name) + "' is not in the manifest");
  } catch (const std::runtime_error& e) {
    throw Error("kernel bundle " + shown + ": " + e.what());
  }
  return bundle;
}

}  // namespace

Bundle parse_bundle(const std::string& bytes, const std::string& signing_key,
                    const std::string& name) {
  MemorySource in(bytes);
  return parse_from(in, signing_key, name);
}

Bundle read_bundle(const std::string& path, const std::string& signing_key) {
  const std::string shown = printable(path, 4096);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error("cannot open the kernel bundle " + shown + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error("kernel bundle " + shown + ": not a regular file");
  // Streamed member by member: memory follows the largest member, never the file's size.
  FileSource in(fd);
  return parse_from(in, signing_key, path);
}

}  // namespace graphattn::detail
