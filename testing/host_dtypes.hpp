// SPDX-License-Identifier: Apache-2.0
// Host-side element conversions for tests and benchmarks, written independently of the device
// code they check: fp16/bf16 by bit manipulation, fp8 by searching the table of all 256 codes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "graphattn/spec.hpp"

namespace graphattn::test {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }
inline uint16_t float_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (man << 13));
  return bits_to_float(sign | (static_cast<uint32_t>(exp - 15 + 127) << 23) | (man << 13));
}
inline uint16_t float_to_fp16(float f) {  // round to nearest even via the double value
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (a < std::ldexp(1.0, -14)) {                                  // subnormal
    double q = std::nearbyint(a * std::ldexp(1.0, 24));            // ties to even (default mode)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  }
  int e;
  double m = std::frexp(a, &e);           // a = m * 2^e, m in [0.5, 1)
  double q = std::nearbyint(m * 2048.0);  // 11 significant bits
  if (q == 2048.0) {
    q = 1024.0;
    ++e;
  }
  const int exp = e - 1 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | (exp << 10) | (static_cast<uint16_t>(q) - 1024));
}

// fp8 decoding straight from the definition.
inline double e4m3_to_double(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 0xf, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}
inline double e5m2_to_double(uint8_t b) {
  const int s = b >> 7, e = (b >> 2) & 0x1f, m = b & 3;
  if (e == 31)
    return m ? std::numeric_limits<double>::quiet_NaN()
             : (s ? -1 : 1) * std::numeric_limits<double>::infinity();
  double v = e == 0 ? std::ldexp(m / 4.0, -14) : std::ldexp(1.0 + m / 4.0, e - 15);
  return s ? -v : v;
}

// Nearest finite code, ties to the even code, saturating (vLLM's __NV_SATFINITE); NaN -> 0x7f.
template <double (*Decode)(uint8_t)>
uint8_t double_to_fp8(double x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  int best = -1, max_code = 0;
  for (int c = 0; c < 128; ++c)
    if (std::isfinite(Decode(static_cast<uint8_t>(c)))) max_code = c;
  // Saturate first: far above the range, |v - a| rounds alike for the top codes.
  if (a >= Decode(static_cast<uint8_t>(max_code))) return static_cast<uint8_t>(sign | max_code);
  double best_err = 0;
  for (int c = 0; c < 128; ++c) {
    const double v = Decode(static_cast<uint8_t>(c));
    if (!std::isfinite(v)) continue;
    const double err = std::fabs(v - a);
    if (best < 0 || err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(sign | best);
}
inline uint8_t double_to_e4m3(double x) { return double_to_fp8<e4m3_to_double>(x); }
inline uint8_t double_to_e5m2(double x) { return double_to_fp8<e5m2_to_double>(x); }

// The model's 16-bit element type by spec dtype.
inline uint16_t to_storage(DType t, double f) {
  return t == DType::kBFloat16 ? float_to_bf16(static_cast<float>(f))
                               : float_to_fp16(static_cast<float>(f));
}
inline double from_storage(DType t, uint16_t h) {
  return t == DType::kBFloat16 ? bf16_to_float(h) : fp16_to_float(h);
}
inline bool is_nan16(DType t, uint16_t h) {
  return t == DType::kBFloat16 ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
}
// The project's accuracy bar against the float64 reference (relative L2).
inline double tolerance(DType t) { return t == DType::kBFloat16 ? 5e-3 : 1e-3; }

// A 16-bit attention output [tokens, row_stride], poisoned with 0xffff before the launch, read
// against the reference want [tokens, row_elems]: the rows from first_row on, their first
// row_elems columns; everything else must still hold the poison (clobbered counts what does
// not).
struct OutputRows {
  std::vector<double> got, want;  // the compared elements, in order
  size_t nan = 0, clobbered = 0;
};
inline OutputRows output_rows(DType t, const std::vector<uint16_t>& out, int64_t row_stride,
                              int64_t row_elems, int64_t first_row,
                              const std::vector<double>& want) {
  OutputRows r;
  const int64_t tokens = row_stride > 0 ? static_cast<int64_t>(out.size()) / row_stride : 0;
  for (int64_t tok = 0; tok < tokens; ++tok)
    for (int64_t i = 0; i < row_stride; ++i) {
      const uint16_t v = out[tok * row_stride + i];
      if (tok < first_row || i >= row_elems) {
        r.clobbered += v != 0xffff;
        continue;
      }
      r.nan += is_nan16(t, v);
      r.got.push_back(from_storage(t, v));
      r.want.push_back(want[tok * row_elems + i]);
    }
  return r;
}

}  // namespace graphattn::test
