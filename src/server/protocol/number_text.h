// Numbers as Redis reads and prints them in arguments and replies: strict
// integers (string2ll), doubles and long doubles (strtod/strtold rules, no
// NaN), and Redis's %.17g / %.17Lf formatting. Used by the command layer and
// by the RESP parser, so it depends on nothing but the standard library.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tierkv::server {

std::optional<int64_t> parse_int64(std::string_view s);  // strict, like string2ll
std::optional<double> parse_double(std::string_view s);  // like strtold, rejects nan
std::string format_double(double v);                     // like Redis's %.17Lg formatting
// Long-double forms, for INCRBYFLOAT's exact Redis results ("10.6", not
// "10.59999999999999964"): strtold parsing and %.17Lf minus trailing zeros.
std::optional<long double> parse_long_double(std::string_view s);
std::string format_long_double(long double v);

}  // namespace tierkv::server
