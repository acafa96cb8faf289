// Configuration values as people write them: sizes and durations with
// units, suffix rewrite rules, and the commented example file made from the
// key table.
#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/config.h"

namespace tierkv {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Unit {
  std::string_view suffix;
  int64_t factor;
};

// Largest first: the shortest exact form wins.
constexpr Unit kByteUnits[] = {{"tb", int64_t{1} << 40},
                               {"gb", int64_t{1} << 30},
                               {"mb", int64_t{1} << 20},
                               {"kb", int64_t{1} << 10}};
constexpr Unit kTimeUnits[] = {{"h", 3600 * 1000}, {"m", 60 * 1000}, {"s", 1000}, {"ms", 1}};

std::string shortest(int64_t v, std::span<const Unit> units) {
  if (v == 0) return "0";
  for (const Unit& u : units) {
    if (v % u.factor == 0) return fmt::format("{}{}", v / u.factor, u.suffix);
  }
  return std::to_string(v);
}

// A TOML value for the example file: strings quoted, numbers and booleans
// bare, sizes and durations as quoted strings with their unit.
std::string toml_value(const ConfigKey& key, const std::string& human) {
  bool bare_number = !human.empty() && human.find_first_not_of("0123456789.-") == std::string::npos;
  switch (key.kind) {
    case ConfigKind::kInt:
    case ConfigKind::kDouble:
      return human;
    case ConfigKind::kBool:
      return human == "yes" ? "true" : "false";
    case ConfigKind::kBytes:
    case ConfigKind::kMillis:
    case ConfigKind::kSeconds:
      if (bare_number) return human;
      break;
    case ConfigKind::kString:
    case ConfigKind::kChoice:
    case ConfigKind::kList:
      break;
  }
  std::string out = "\"";
  for (char c : human) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Result<int64_t> parse_byte_size(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return Status::invalid_argument("expected a size such as 4096, 64kb or 1gb");
  int64_t base = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + i, base);
  if (ec != std::errc()) return Status::invalid_argument("number too large");
  std::string unit = lower(text.substr(i));
  int shift = 0;
  if (unit.empty() || unit == "b")
    shift = 0;
  else if (unit == "k" || unit == "kb" || unit == "kib")
    shift = 10;
  else if (unit == "m" || unit == "mb" || unit == "mib")
    shift = 20;
  else if (unit == "g" || unit == "gb" || unit == "gib")
    shift = 30;
  else if (unit == "t" || unit == "tb" || unit == "tib")
    shift = 40;
  else
    return Status::invalid_argument("unknown unit '" + unit + "'");
  if (base > (std::numeric_limits<int64_t>::max() >> shift))
    return Status::invalid_argument("size too large");
  return base << shift;
}

Result<std::vector<SuffixRewrite>> parse_suffix_rewrites(std::string_view text) {
  std::vector<SuffixRewrite> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view rule = text.substr(pos, end - pos);
    pos = end + 1;
    while (!rule.empty() && rule.front() == ' ') rule.remove_prefix(1);
    while (!rule.empty() && rule.back() == ' ') rule.remove_suffix(1);
    if (rule.empty()) continue;
    size_t eq = rule.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == rule.size())
      return Status::invalid_argument(
          fmt::format("rule '{}' is not SUFFIX=REPLACEMENT with both non-empty", rule));
    out.push_back({std::string(rule.substr(0, eq)), std::string(rule.substr(eq + 1))});
  }
  return out;
}

Result<int64_t> parse_duration_ms(std::string_view text, int64_t unit_ms) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return Status::invalid_argument("expected a duration such as 500ms, 10s or 5m");
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + i, n);
  if (ec != std::errc()) return Status::invalid_argument("number too large");
  std::string unit = lower(text.substr(i));
  int64_t factor = unit_ms;
  if (!unit.empty()) {
    factor = 0;
    for (const Unit& u : kTimeUnits) {
      if (u.suffix == unit) factor = u.factor;
    }
    if (factor == 0) return Status::invalid_argument("unknown unit '" + unit + "'");
  }
  if (n > std::numeric_limits<int64_t>::max() / factor)
    return Status::invalid_argument("duration too large");
  return n * factor;
}

std::string format_byte_size(int64_t bytes) {
  return shortest(bytes, kByteUnits);
}

std::string format_duration_ms(int64_t ms) {
  return shortest(ms, kTimeUnits);
}

std::string config_example_toml() {
  Config defaults;
  std::string out =
      "# tierkv-server configuration: every key with its default, commented out.\n"
      "# Generated by `tierkv-server --print-example-config`; CI checks that the\n"
      "# copy in packaging/ is in sync (scripts/check-packaging.sh).\n"
      "#\n"
      "# Use it with `tierkv-server --config FILE`; flags (--memory 4gb) override\n"
      "# the file. Keys take '-' or '_'. Sizes take units (4096, 64kb, 1gb),\n"
      "# durations too (500ms, 10s, 5m; a bare number is in the key's unit).\n"
      "# \"CONFIG SET\" marks the keys that can be changed at run time.\n";
  for (const ConfigKey& key : config_keys()) {
    std::string human = *config_get_human(defaults, key.name);
    out += fmt::format("\n# {}{}\n# {} = {}\n", key.help,
                       key.runtime_settable() ? " (CONFIG SET)" : "", key.name,
                       toml_value(key, human));
  }
  return out;
}

}  // namespace tierkv
