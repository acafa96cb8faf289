// The kinds of configuration keys (config_key_kinds.h).
#include "core/config_key_kinds.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

namespace tierkv::config_kinds {
namespace {

constexpr std::array<std::string_view, 2> kYesNo = {"yes", "no"};

Status out_of_bounds(std::string_view key, std::string_view value, double min, double max) {
  // kMaxI is not exactly representable as int64_t once it is a double.
  if (max >= kMaxI)
    return bad_value(key, value, fmt::format("must be at least {}", static_cast<int64_t>(min)));
  return bad_value(key, value,
                   fmt::format("must be between {} and {}", static_cast<int64_t>(min),
                               static_cast<int64_t>(max)));
}

Result<int64_t> parse_number(ConfigKind kind, std::string_view value) {
  switch (kind) {
    case ConfigKind::kBytes:
      return parse_byte_size(value);
    case ConfigKind::kMillis:
      return parse_duration_ms(value, 1);
    case ConfigKind::kSeconds: {
      Result<int64_t> ms = parse_duration_ms(value, 1000);
      if (ms && *ms % 1000 != 0) return Status::invalid_argument("not a whole number of seconds");
      if (!ms) return ms;
      return *ms / 1000;
    }
    default:
      return parse_int(value);
  }
}

}  // namespace

Status bad_value(std::string_view key, std::string_view value, std::string_view why) {
  return Status::invalid_argument(fmt::format("invalid value '{}' for '{}': {}", value, key, why));
}

Result<int64_t> parse_int(std::string_view text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty())
    return Status::invalid_argument("not an integer");
  return v;
}

std::string lower(std::string_view text) {
  std::string v(text);
  std::ranges::transform(v, v.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return v;
}

KeySpec string_key(ConfigKey k, std::string Config::*m) {
  k.kind = ConfigKind::kString;
  return {k,
          [m](Config& c, std::string_view v) {
            c.*m = std::string(v);
            return Status::ok();
          },
          [m](const Config& c) { return c.*m; }};
}

KeySpec int_key(ConfigKey k, int64_t Config::*m, double min, double max, ConfigKind kind) {
  k.kind = kind;
  return {k,
          [k, m, min, max](Config& c, std::string_view value) {
            Result<int64_t> v = parse_number(k.kind, value);
            if (!v) return bad_value(k.name, value, v.status().message());
            if (*v < min || static_cast<double>(*v) > max)
              return out_of_bounds(k.name, value, min, max);
            c.*m = *v;
            return Status::ok();
          },
          [m](const Config& c) { return std::to_string(c.*m); }};
}

KeySpec bytes_key(ConfigKey k, int64_t Config::*m, double min, double max) {
  return int_key(k, m, min, max, ConfigKind::kBytes);
}

KeySpec millis_key(ConfigKey k, int64_t Config::*m, double min, double max) {
  return int_key(k, m, min, max, ConfigKind::kMillis);
}

KeySpec double_key(ConfigKey k, double Config::*m, double min, double max) {
  k.kind = ConfigKind::kDouble;
  return {k,
          [k, m, min, max](Config& c, std::string_view value) {
            std::string tmp(value);
            char* end = nullptr;
            double v = std::strtod(tmp.c_str(), &end);
            if (tmp.empty() || end != tmp.c_str() + tmp.size())
              return bad_value(k.name, value, "not a number");
            if (!(v >= min && v <= max))
              return bad_value(k.name, value, fmt::format("must be between {} and {}", min, max));
            c.*m = v;
            return Status::ok();
          },
          [m](const Config& c) { return fmt::format("{}", c.*m); }};
}

KeySpec guarded(KeySpec spec) {
  spec.key.guarded = true;
  return spec;
}

KeySpec bool_key(ConfigKey k, bool Config::*m) {
  k.kind = ConfigKind::kBool;
  return {k,
          [k, m](Config& c, std::string_view value) {
            Result<size_t> i = parse_choice(k.name, value, kYesNo);
            if (!i) return i.status();
            c.*m = *i == 0;
            return Status::ok();
          },
          [m](const Config& c) { return std::string(c.*m ? "yes" : "no"); }};
}

KeySpec rewrites_key(ConfigKey k, std::vector<SuffixRewrite> Config::*m) {
  k.kind = ConfigKind::kList;
  return {k,
          [k, m](Config& c, std::string_view value) {
            Result<std::vector<SuffixRewrite>> rules = parse_suffix_rewrites(value);
            if (!rules) return bad_value(k.name, value, rules.status().message());
            c.*m = std::move(*rules);
            return Status::ok();
          },
          [m](const Config& c) {
            std::string out;
            for (const SuffixRewrite& r : c.*m)
              out += (out.empty() ? "" : ",") + r.from + "=" + r.to;
            return out;
          }};
}

KeySpec list_key(ConfigKey k, std::vector<std::string> Config::*m) {
  k.kind = ConfigKind::kList;
  return {k,
          [m](Config& c, std::string_view value) {
            std::vector<std::string> items;
            for (std::string_view rest = value; !rest.empty();) {
              const size_t comma = std::min(rest.find(','), rest.size());
              std::string_view item = rest.substr(0, comma);
              rest.remove_prefix(std::min(comma + 1, rest.size()));
              while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
              while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
              if (!item.empty()) items.emplace_back(item);
            }
            c.*m = std::move(items);
            return Status::ok();
          },
          [m](const Config& c) { return fmt::format("{}", fmt::join(c.*m, ",")); }};
}

}  // namespace tierkv::config_kinds
