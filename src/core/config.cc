#include "core/config.h"

#include <fmt/format.h>
#include <toml++/toml.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <functional>
#include <limits>

namespace tierkv {
namespace {

enum class Kind { kString, kInt, kBytes, kDouble, kEnum };

struct KeySpec {
  ConfigKey key;
  Kind kind;
  double min = 0;
  double max = 0;
  std::vector<std::string_view> choices;
  std::function<void*(Config&)> field;
};

template <typename T>
std::function<void*(Config&)> field_of(T Config::*member) {
  return [member](Config& c) -> void* { return &(c.*member); };
}

constexpr double kMaxI = static_cast<double>(std::numeric_limits<int64_t>::max());

const std::vector<KeySpec>& specs() {
  static const std::vector<KeySpec> table = {
      {{"bind", "address to listen on", false}, Kind::kString, 0, 0, {}, field_of(&Config::bind)},
      {{"port", "TCP port (0 disables TCP)", false},
       Kind::kInt,
       0,
       65535,
       {},
       field_of(&Config::port)},
      {{"unixsocket", "Unix socket path (empty: none)", false},
       Kind::kString,
       0,
       0,
       {},
       field_of(&Config::unixsocket)},
      {{"io-threads", "network threads (0: one per core)", false},
       Kind::kInt,
       0,
       256,
       {},
       field_of(&Config::io_threads)},
      {{"maxclients", "maximum connected clients", true},
       Kind::kInt,
       1,
       1000000,
       {},
       field_of(&Config::maxclients)},
      {{"timeout", "close clients idle this many seconds (0: never)", true},
       Kind::kInt,
       0,
       kMaxI,
       {},
       field_of(&Config::timeout_s)},
      {{"requirepass", "password for AUTH (empty: no auth)", true},
       Kind::kString,
       0,
       0,
       {},
       field_of(&Config::requirepass)},
      {{"proto-max-bulk-len", "largest bulk string accepted", true},
       Kind::kBytes,
       1 << 20,
       kMaxI,
       {},
       field_of(&Config::proto_max_bulk_len)},
      {{"max-multibulk-args", "most arguments in one command", true},
       Kind::kInt,
       1,
       1 << 30,
       {},
       field_of(&Config::max_multibulk_args)},
      {{"max-inline-len", "longest inline command", true},
       Kind::kBytes,
       1024,
       1 << 30,
       {},
       field_of(&Config::max_inline_len)},
      {{"client-output-buffer-limit", "bytes queued to one client before it is cut off", true},
       Kind::kBytes,
       1 << 16,
       kMaxI,
       {},
       field_of(&Config::client_output_buffer_limit)},
      {{"client-query-buffer-limit",
        "bytes of one command being received (a streamed value counts) before the client is "
        "closed",
        true},
       Kind::kBytes,
       1 << 20,
       kMaxI,
       {},
       field_of(&Config::client_query_buffer_limit)},
      {{"metrics-bind", "address of the HTTP /metrics endpoint", false},
       Kind::kString,
       0,
       0,
       {},
       field_of(&Config::metrics_bind)},
      {{"metrics-port", "port of the HTTP /metrics endpoint (0 disables)", false},
       Kind::kInt,
       0,
       65535,
       {},
       field_of(&Config::metrics_port)},
      {{"log-level", "trace, debug, info, warn, error", true},
       Kind::kEnum,
       0,
       0,
       {"trace", "debug", "info", "warn", "error"},
       field_of(&Config::log_level)},
      {{"max-key-size", "longest key accepted", true},
       Kind::kBytes,
       1,
       512 << 20,
       {},
       field_of(&Config::max_key_size)},
      {{"max-object-size", "largest value accepted", true},
       Kind::kBytes,
       1,
       kMaxI,
       {},
       field_of(&Config::max_object_size)},
      {{"chunk-size", "unit of residency and I/O (power of two, 4k..64m)", false},
       Kind::kBytes,
       4096,
       64 << 20,
       {},
       field_of(&Config::chunk_size)},
      {{"memory", "DRAM budget of the memory tier", true},
       Kind::kBytes,
       1 << 20,
       kMaxI,
       {},
       field_of(&Config::memory)},
      {{"eviction-policy", "s3fifo, lru, clock or sieve", false},
       Kind::kEnum,
       0,
       0,
       {"s3fifo", "lru", "clock", "sieve"},
       field_of(&Config::eviction_policy)},
      {{"memory-shards", "index shards (power of two)", false},
       Kind::kInt,
       1,
       4096,
       {},
       field_of(&Config::memory_shards)},
      {{"lease-max-fraction", "share of memory that leases may protect", true},
       Kind::kDouble,
       0,
       1,
       {},
       field_of(&Config::lease_max_fraction)},
      {{"lease-ttl-ms", "default lease length", true},
       Kind::kInt,
       1,
       kMaxI,
       {},
       field_of(&Config::lease_ttl_ms)},
      {{"active-expire-hz", "active expiry cycles per second (0: lazy only)", true},
       Kind::kInt,
       0,
       500,
       {},
       field_of(&Config::active_expire_hz)},
      {{"flash-path", "file or block device of the flash tier", false},
       Kind::kString,
       0,
       0,
       {},
       field_of(&Config::flash_path)},
      {{"flash-size", "bytes of flash to use (0: no flash tier)", false},
       Kind::kBytes,
       0,
       kMaxI,
       {},
       field_of(&Config::flash_size)},
      {{"region-size", "flash region size", false},
       Kind::kBytes,
       1 << 20,
       1 << 30,
       {},
       field_of(&Config::region_size)},
      {{"flash-fsync", "when flash writes are fsynced: none, everysec, always", false},
       Kind::kEnum,
       0,
       0,
       {"none", "everysec", "always"},
       field_of(&Config::flash_fsync)},
      {{"flash-queue-depth", "flash reads in flight", false},
       Kind::kInt,
       1,
       4096,
       {},
       field_of(&Config::flash_queue_depth)},
      {{"flash-reinsertion", "copy chunks that were hit forward when their region is reclaimed",
        false},
       Kind::kEnum,
       0,
       0,
       {"no", "yes"},
       field_of(&Config::flash_reinsertion)},
      {{"flash-preallocate", "allocate the whole flash file at start", false},
       Kind::kEnum,
       0,
       0,
       {"yes", "no"},
       field_of(&Config::flash_preallocate)},
      {{"flash-write-queue", "bytes accepted for flash but not yet written", false},
       Kind::kBytes,
       1 << 20,
       kMaxI,
       {},
       field_of(&Config::flash_write_queue)},
      {{"backing-latency-ns", "fixed latency added to every flash read (model knob)", false},
       Kind::kInt,
       0,
       1e9,
       {},
       field_of(&Config::backing_latency_ns)},
      {{"offload-policy", "when memory data goes to flash: on_evict, write_through", false},
       Kind::kEnum,
       0,
       0,
       {"on_evict", "write_through"},
       field_of(&Config::offload_policy)},
      {{"offload-wait-ms", "how long a write waits for flash to drain before OOM", true},
       Kind::kInt,
       0,
       600000,
       {},
       field_of(&Config::offload_wait_ms)},
      {{"promotion-threshold", "flash hits before an object is promoted to memory", true},
       Kind::kInt,
       1,
       255,
       {},
       field_of(&Config::promotion_threshold)},
      {{"promotion-max-inflight", "promotions and prefetches in flight", true},
       Kind::kInt,
       1,
       65536,
       {},
       field_of(&Config::promotion_max_inflight)},
      {{"flash-read-window", "chunks a flash read holds ahead of its consumer", true},
       Kind::kInt,
       1,
       4096,
       {},
       field_of(&Config::flash_read_window)},
      {{"flash-read-inflight", "chunk reads in flight per flash read", true},
       Kind::kInt,
       1,
       4096,
       {},
       field_of(&Config::flash_read_inflight)},
      {{"flash-read-buffer", "cap on all flash read buffers (at least twice chunk-size)", true},
       Kind::kBytes,
       1 << 20,
       kMaxI,
       {},
       field_of(&Config::flash_read_buffer)},
  };
  return table;
}

std::string normalize(std::string_view name) {
  std::string out(name);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (c == '_') c = '-';
  }
  return out;
}

const KeySpec* find_spec(std::string_view name) {
  std::string n = normalize(name);
  for (const auto& s : specs()) {
    if (s.key.name == n) return &s;
  }
  return nullptr;
}

Status out_of_bounds(const KeySpec& s, std::string_view value) {
  // kMaxI is not exactly representable as int64_t once it is a double.
  if (s.max >= kMaxI)
    return Status::invalid_argument(fmt::format("invalid value '{}' for '{}': must be at least {}",
                                                value, s.key.name, static_cast<int64_t>(s.min)));
  return Status::invalid_argument(
      fmt::format("invalid value '{}' for '{}': must be between {} and {}", value, s.key.name,
                  static_cast<int64_t>(s.min), static_cast<int64_t>(s.max)));
}

Result<int64_t> parse_int(std::string_view text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty())
    return Status::invalid_argument("not an integer");
  return v;
}

Status set_by_spec(Config& c, const KeySpec& s, std::string_view value) {
  void* f = s.field(c);
  auto bad = [&](std::string_view why) {
    return Status::invalid_argument(
        fmt::format("invalid value '{}' for '{}': {}", value, s.key.name, why));
  };
  switch (s.kind) {
    case Kind::kString:
      *static_cast<std::string*>(f) = std::string(value);
      return Status::ok();
    case Kind::kEnum: {
      // Lower-case only: choices keep their '_' (on_evict), unlike key names.
      std::string v(value);
      std::ranges::transform(v, v.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (std::find(s.choices.begin(), s.choices.end(), v) == s.choices.end())
        return bad(fmt::format("expected one of {}", fmt::join(s.choices, ", ")));
      *static_cast<std::string*>(f) = v;
      return Status::ok();
    }
    case Kind::kInt:
    case Kind::kBytes: {
      Result<int64_t> v = s.kind == Kind::kInt ? parse_int(value) : parse_byte_size(value);
      if (!v) return bad(v.status().message());
      if (*v < s.min || static_cast<double>(*v) > s.max) return out_of_bounds(s, value);
      *static_cast<int64_t*>(f) = *v;
      return Status::ok();
    }
    case Kind::kDouble: {
      std::string tmp(value);
      char* end = nullptr;
      double v = std::strtod(tmp.c_str(), &end);
      if (tmp.empty() || end != tmp.c_str() + tmp.size()) return bad("not a number");
      if (v < s.min || v > s.max)
        return bad(fmt::format("must be between {} and {}", s.min, s.max));
      *static_cast<double*>(f) = v;
      return Status::ok();
    }
  }
  return Status::internal("unhandled config kind");
}

std::string format_value(const Config& c, const KeySpec& s) {
  void* f = s.field(const_cast<Config&>(c));
  switch (s.kind) {
    case Kind::kString:
    case Kind::kEnum:
      return *static_cast<std::string*>(f);
    case Kind::kInt:
    case Kind::kBytes:
      return std::to_string(*static_cast<int64_t*>(f));
    case Kind::kDouble:
      return fmt::format("{}", *static_cast<double*>(f));
  }
  return "";
}

std::string toml_node_text(const toml::node& node) {
  if (auto s = node.value<std::string>()) return *s;
  if (auto b = node.value_exact<bool>()) return *b ? "yes" : "no";
  if (auto i = node.value_exact<int64_t>()) return std::to_string(*i);
  if (auto d = node.value_exact<double>()) return fmt::format("{}", *d);
  return "";
}

Status apply_table(Config& config, const toml::table& table, const std::string& origin) {
  for (const auto& [k, node] : table) {
    const KeySpec* s = find_spec(k.str());
    if (!s) return Status::invalid_argument(fmt::format("{}: unknown key '{}'", origin, k.str()));
    if (!node.is_value())
      return Status::invalid_argument(fmt::format("{}: '{}' must be a value", origin, k.str()));
    TIERKV_RETURN_IF_ERROR(set_by_spec(config, *s, toml_node_text(node)));
  }
  return Status::ok();
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> out;
    for (const auto& s : specs()) out.push_back(s.key);
    return out;
  }();
  return keys;
}

Result<int64_t> parse_byte_size(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return Status::invalid_argument("expected a size such as 4096, 64kb or 1gb");
  Result<int64_t> base = parse_int(text.substr(0, i));
  if (!base) return Status::invalid_argument("number too large");
  std::string unit = normalize(text.substr(i));
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
  if (*base > (std::numeric_limits<int64_t>::max() >> shift))
    return Status::invalid_argument("size too large");
  return *base << shift;
}

Status config_set(Config& config, std::string_view name, std::string_view value) {
  const KeySpec* s = find_spec(name);
  if (!s) return Status::invalid_argument(fmt::format("unknown configuration key '{}'", name));
  return set_by_spec(config, *s, value);
}

Result<std::string> config_get(const Config& config, std::string_view name) {
  const KeySpec* s = find_spec(name);
  if (!s) return Status::not_found(fmt::format("unknown configuration key '{}'", name));
  return format_value(config, *s);
}

Status config_validate(const Config& c) {
  if (!std::has_single_bit(static_cast<uint64_t>(c.chunk_size)))
    return Status::invalid_argument(
        fmt::format("invalid value '{}' for 'chunk-size': must be a power of two", c.chunk_size));
  if (!std::has_single_bit(static_cast<uint64_t>(c.memory_shards)))
    return Status::invalid_argument(fmt::format(
        "invalid value '{}' for 'memory-shards': must be a power of two", c.memory_shards));
  if (c.memory < 4 * c.chunk_size)
    return Status::invalid_argument(fmt::format(
        "invalid value '{}' for 'memory': must hold at least 4 chunks of 'chunk-size'", c.memory));
  if (c.max_object_size > c.proto_max_bulk_len)
    return Status::invalid_argument(
        fmt::format("invalid value '{}' for 'max-object-size': exceeds 'proto-max-bulk-len' ({})",
                    c.max_object_size, c.proto_max_bulk_len));
  // A region must hold at least one whole chunk record (header and key too).
  if (c.region_size < 2 * c.chunk_size)
    return Status::invalid_argument(
        fmt::format("invalid value '{}' for 'region-size': must be at least twice 'chunk-size'",
                    c.region_size));
  if (c.flash_read_buffer < 2 * c.chunk_size)
    return Status::invalid_argument(fmt::format(
        "invalid value '{}' for 'flash-read-buffer': must be at least twice 'chunk-size'",
        c.flash_read_buffer));
  if (c.flash_size != 0 && c.flash_size < 2 * c.region_size)
    return Status::invalid_argument(fmt::format(
        "invalid value '{}' for 'flash-size': must be 0 or at least two regions", c.flash_size));
  return Status::ok();
}

// Debian's toml++ is built with exceptions; they stop here.
Status config_apply_toml_text(Config& config, std::string_view text) {
  try {
    return apply_table(config, toml::parse(text), "config");
  } catch (const toml::parse_error& err) {
    return Status::invalid_argument(
        fmt::format("config line {}: {}", err.source().begin.line, err.description()));
  }
}

Status config_apply_toml_file(Config& config, const std::string& path) {
  try {
    return apply_table(config, toml::parse_file(path), path);
  } catch (const toml::parse_error& err) {
    return Status::invalid_argument(
        fmt::format("{}:{}: {}", path, err.source().begin.line, err.description()));
  }
}

Result<Config> load_config(int argc, const char* const* argv, std::string_view program) {
  Config config;
  CLI::App app{std::string(program)};
  std::string config_path;
  app.add_option("-c,--config", config_path, "TOML configuration file");
  std::vector<std::pair<const KeySpec*, std::string>> flag_values(specs().size());
  for (size_t i = 0; i < specs().size(); ++i) {
    const KeySpec& s = specs()[i];
    flag_values[i].first = &s;
    app.add_option("--" + std::string(s.key.name), flag_values[i].second,
                   std::string(s.key.help) + " (default " + format_value(config, s) + ")")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // as redis-server: last wins
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return Status::unavailable(app.help());
  } catch (const CLI::ParseError& e) {
    return Status::invalid_argument(e.what());
  }
  if (!config_path.empty()) TIERKV_RETURN_IF_ERROR(config_apply_toml_file(config, config_path));
  for (size_t i = 0; i < specs().size(); ++i) {
    if (app.count("--" + std::string(specs()[i].key.name)) == 0) continue;
    TIERKV_RETURN_IF_ERROR(set_by_spec(config, specs()[i], flag_values[i].second));
  }
  TIERKV_RETURN_IF_ERROR(config_validate(config));
  return config;
}

}  // namespace tierkv
