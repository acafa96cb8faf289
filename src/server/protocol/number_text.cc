#include "server/protocol/number_text.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tierkv::server {

// Redis's string2ll: no spaces, no '+', no leading zeros, fits in int64.
std::optional<int64_t> parse_int64(std::string_view s) {
  if (s.empty() || s.size() >= 21) return std::nullopt;
  if (s.size() == 1 && s[0] == '0') return 0;
  size_t i = 0;
  bool negative = false;
  if (s[0] == '-') {
    negative = true;
    i = 1;
    if (s.size() == 1) return std::nullopt;
  }
  if (s[i] < '1' || s[i] > '9') return std::nullopt;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  if (negative) {
    if (v > uint64_t{1} << 63) return std::nullopt;
    return static_cast<int64_t>(0 - v);
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(v);
}

namespace {

// Redis's string2ld (and string2d): the conversion on a bounded copy, no
// leading space, the whole string consumed, no overflow, no NaN.
template <typename T, T (*Convert)(const char*, char**)>
std::optional<T> parse_floating(std::string_view s) {
  char buf[5 * 1024];
  if (s.empty() || s.size() >= sizeof(buf)) return std::nullopt;
  if (std::isspace(static_cast<unsigned char>(s[0]))) return std::nullopt;
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  char* end = nullptr;
  errno = 0;
  T v = Convert(buf, &end);
  if (end != buf + s.size()) return std::nullopt;
  if (errno == ERANGE && (std::isinf(v) || std::fpclassify(v) == FP_ZERO)) return std::nullopt;
  if (std::isnan(v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<long double> parse_long_double(std::string_view s) {
  return parse_floating<long double, std::strtold>(s);
}

std::optional<double> parse_double(std::string_view s) {
  return parse_floating<double, std::strtod>(s);
}

std::string format_double(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  int n = std::snprintf(buf, sizeof(buf), "%.17g", v);
  return std::string(buf, static_cast<size_t>(n));
}

// Redis's ld2string in LD_STR_HUMAN mode (INCRBYFLOAT): %.17Lf with the
// trailing zeros (and a bare dot) removed, "-0" printed as "0".
std::string format_long_double(long double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[5 * 1024];
  int n = std::snprintf(buf, sizeof(buf), "%.17Lf", v);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) return "0";
  std::string_view text(buf, static_cast<size_t>(n));
  if (text.find('.') != std::string_view::npos) {
    while (!text.empty() && text.back() == '0') text.remove_suffix(1);
    if (!text.empty() && text.back() == '.') text.remove_suffix(1);
  }
  if (text == "-0") text = "0";
  return std::string(text);
}

}  // namespace tierkv::server
