// SPDX-License-Identifier: Apache-2.0
// SHA-256 and HMAC-SHA256 (jit_cache/sha256.hpp) against the published vectors: FIPS 180-4's
// examples and RFC 4231's HMAC test cases, plus the padding boundaries at 55, 56 and 64 bytes.
#include <doctest/doctest.h>

#include <string>

#include "jit_cache/sha256.hpp"

using graphattn::detail::hex_of;
using graphattn::detail::hmac_sha256;
using graphattn::detail::sha256;

namespace {
std::string sha_hex(const std::string& s) { return hex_of(sha256(s.data(), s.size())); }
}  // namespace

TEST_CASE("sha256: FIPS 180-4 examples and the padding boundaries") {
  CHECK(sha_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(sha_hex(std::string(55, 'x')) ==
        "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  CHECK(sha_hex(std::string(56, 'x')) ==
        "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  CHECK(sha_hex(std::string(64, 'x')) ==
        "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
}

TEST_CASE("sha256: fed in pieces equals fed at once") {
  const std::string text(1000, 'q');
  graphattn::detail::Sha256 s;
  for (size_t i = 0; i < text.size(); i += 7)
    s.update(text.data() + i, std::min<size_t>(7, text.size() - i));
  CHECK(hex_of(s.finish()) == sha_hex(text));
}

TEST_CASE("hmac_sha256: RFC 4231 test cases 1, 2 and 6") {
  CHECK(hex_of(hmac_sha256(std::string(20, '\x0b'), {"Hi There"})) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex_of(hmac_sha256("Jefe", {"what do ya want ", "for nothing?"})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex_of(hmac_sha256(std::string(131, '\xaa'),
                           {"Test Using Larger Than Block-Size Key - Hash Key First"})) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("digests_equal compares every byte") {
  auto a = sha256("a", 1);
  auto b = a;
  CHECK(graphattn::detail::digests_equal(a, b));
  b[31] ^= 1;
  CHECK_FALSE(graphattn::detail::digests_equal(a, b));
  b = a;
  b[0] ^= 0x80;
  CHECK_FALSE(graphattn::detail::digests_equal(a, b));
}
