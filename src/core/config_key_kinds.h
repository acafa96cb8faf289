// The kinds of configuration keys: each builder makes a key's parser and
// validator (set) and its CONFIG GET text (get) from the Config member it
// holds. The key table (config_keys.cc) is made of them; nothing outside
// src/core uses this header.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace tierkv::config_kinds {

// A key's parser and validator (set) and its CONFIG GET text (get).
struct KeySpec {
  ConfigKey key;
  std::function<Status(Config&, std::string_view)> set;
  std::function<std::string(const Config&)> get;
};

constexpr double kMaxI = static_cast<double>(std::numeric_limits<int64_t>::max());

Status bad_value(std::string_view key, std::string_view value, std::string_view why);
Result<int64_t> parse_int(std::string_view text);
std::string lower(std::string_view text);

// Index of `value` (lower-cased) in `names`, or an error listing them.
template <size_t N>
Result<size_t> parse_choice(std::string_view key, std::string_view value,
                            const std::array<std::string_view, N>& names) {
  // Lower-case only: choices keep their '_' (on_evict), unlike key names.
  std::string v = lower(value);
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == v) return i;
  }
  return bad_value(key, value, fmt::format("expected one of {}", fmt::join(names, ", ")));
}

KeySpec string_key(ConfigKey k, std::string Config::*m);
// An integer within [min, max]; sizes and durations take units (see
// parse_byte_size, parse_duration_ms).
KeySpec int_key(ConfigKey k, int64_t Config::*m, double min, double max,
                ConfigKind kind = ConfigKind::kInt);
KeySpec bytes_key(ConfigKey k, int64_t Config::*m, double min, double max);
KeySpec millis_key(ConfigKey k, int64_t Config::*m, double min, double max);
KeySpec double_key(ConfigKey k, double Config::*m, double min, double max);
KeySpec bool_key(ConfigKey k, bool Config::*m);
// A key that names files, sources or hosts (enable-protected-configs).
KeySpec guarded(KeySpec spec);
KeySpec rewrites_key(ConfigKey k, std::vector<SuffixRewrite> Config::*m);
// A comma-separated list of non-empty items (TOML: also an array of strings).
KeySpec list_key(ConfigKey k, std::vector<std::string> Config::*m);

// An enumeration: names[i] is the value E(i).
template <typename E, size_t N>
KeySpec enum_key(ConfigKey k, E Config::*m, const std::array<std::string_view, N>& names) {
  k.kind = ConfigKind::kChoice;
  return {k,
          [k, m, &names](Config& c, std::string_view value) {
            Result<size_t> i = parse_choice(k.name, value, names);
            if (!i) return i.status();
            c.*m = static_cast<E>(*i);
            return Status::ok();
          },
          [m, &names](const Config& c) { return std::string(names[static_cast<size_t>(c.*m)]); }};
}

}  // namespace tierkv::config_kinds
