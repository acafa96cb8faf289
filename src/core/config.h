// Configuration: embedded defaults, then a TOML file, then command-line flags.
//
// Every key is declared once in a table (config.cc) with its parser, its
// validator (bounds, choices) and, if CONFIG SET may change it at run time,
// the apply hook that makes the new value take effect (as Redis's config.c
// does). The TOML loader, the CLI, and the server's CONFIG GET/SET all go
// through that table, so a key cannot be valid in one place and unknown in
// another. Enumerations are parsed once, here, into typed values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tierkv {

enum class EvictionPolicyKind : uint8_t { kS3Fifo, kLru, kClock, kSieve };
enum class FlashFsync : uint8_t { kNone, kEverySec, kAlways };
enum class OffloadPolicy : uint8_t { kOnEvict, kWriteThrough };
enum class LogLevel : uint8_t { kTrace, kDebug, kInfo, kWarn, kError };
// enable-protected-configs: who may CONFIG SET a key that names files,
// sources or hosts (Redis 7's setting of the same name).
enum class ProtectedConfigs : uint8_t { kNo, kYes, kLocal };
// tls-auth-clients: whether a TLS client must show a certificate.
enum class TlsAuthClients : uint8_t { kYes, kNo, kOptional };

// The names CONFIG GET prints (and the parser accepts).
std::string_view name_of(EvictionPolicyKind v);
std::string_view name_of(FlashFsync v);
std::string_view name_of(OffloadPolicy v);
std::string_view name_of(LogLevel v);
std::string_view name_of(ProtectedConfigs v);
std::string_view name_of(TlsAuthClients v);

// exists-prefetch-map: a probed key ending in `from` prefetches the key
// with that suffix replaced by `to` ("metadata=kv_bytes").
struct SuffixRewrite {
  std::string from;
  std::string to;
  bool operator==(const SuffixRewrite&) const = default;
};
// Parses "a=b,c=d" (empty: no rules). Errors name the key.
Result<std::vector<SuffixRewrite>> parse_suffix_rewrites(std::string_view text);

struct Config {
  // server
  std::string bind = "127.0.0.1";
  int64_t port = 6380;
  std::string unixsocket;  // empty: no Unix socket
  int64_t io_threads = 0;  // 0: number of cores
  int64_t maxclients = 10000;
  int64_t timeout_s = 0;  // idle client timeout; 0 disables
  std::string requirepass;
  std::string aclfile;           // ACL users, one "user <name> <rules>" per line
  int64_t acllog_max_len = 128;  // entries ACL LOG keeps
  int64_t proto_max_bulk_len = int64_t{1} << 30;
  int64_t max_multibulk_args = 1 << 20;
  int64_t max_inline_len = 64 << 10;
  int64_t client_output_buffer_limit = int64_t{256} << 20;
  int64_t client_query_buffer_limit = int64_t{1} << 30;  // Redis's default
  // All clients' query, output and MULTI buffers together; past it the
  // largest client is closed (0: no limit, Redis's default).
  int64_t maxmemory_clients = 0;
  std::string metrics_bind = "127.0.0.1";
  int64_t metrics_port = 9380;  // 0 disables the HTTP endpoint
  LogLevel log_level = LogLevel::kInfo;
  bool protected_mode = true;  // refuse non-loopback peers when no requirepass
  ProtectedConfigs protected_configs = ProtectedConfigs::kNo;
  int64_t metrics_timeout_ms = 5000;        // an HTTP client that sends no request is closed
  int64_t metrics_max_clients = 16;         // HTTP connections at once; more are closed at once
  int64_t slowlog_log_slower_than = 10000;  // us; -1 disables, 0 logs every command
  int64_t slowlog_max_len = 128;

  // data model
  int64_t max_key_size = 64 << 10;
  int64_t max_object_size = int64_t{1} << 30;
  int64_t chunk_size = 1 << 20;

  // memory tier
  int64_t memory = int64_t{1} << 30;
  EvictionPolicyKind eviction_policy = EvictionPolicyKind::kS3Fifo;
  // The heap on transparent huge pages where the kernel offers them on
  // request (glibc's malloc.hugetlb tunable, set by one re-exec at start).
  // Off by default: large values churning through a huge-page heap cost
  // twice the CPU per GET (memory-tier.md).
  bool malloc_huge_pages = false;
  int64_t memory_shards = 32;
  double lease_max_fraction = 0.25;
  // With flash: a value larger than this share of the budget is written
  // straight to flash (a SET larger than memory included).
  double large_value_memory_fraction = 0.5;
  int64_t lease_ttl_ms = 10000;
  int64_t active_expire_hz = 10;

  // sizing: online miss-ratio curves (store/sizing)
  double mrc_sample_rate = 1.0;  // share of keys sampled at first; 0: off
  int64_t mrc_max_bytes = 1 << 20;

  // flash tier (flash_size 0: memory only)
  std::string flash_path = "./tierkv-data/";  // a directory: holds flash.dat
  int64_t flash_size = int64_t{8} << 30;
  int64_t region_size = int64_t{64} << 20;
  FlashFsync flash_fsync = FlashFsync::kNone;
  int64_t flash_queue_depth = 64;
  bool flash_reinsertion = true;
  double flash_reinsertion_share = 0.1;   // of each region copied forward, at most
  double flash_snapshot_area = 1.0 / 64;  // share of the region space
  bool flash_preallocate = true;
  bool flash_direct_io = true;         // no: buffered, e.g. to compare like with like
  bool flash_page_cache_reads = true;  // buffered: try the page cache on the caller's thread
  int64_t flash_write_queue = int64_t{64} << 20;  // accepted, unwritten bytes
  int64_t backing_latency_ns = 0;
  int64_t backing_bandwidth = 0;  // bytes per second; 0: no limit
  int64_t key_load_delay_us = 0;  // tests: a crash scan slow enough to watch

  // tiering (store)
  OffloadPolicy offload_policy = OffloadPolicy::kOnEvict;
  int64_t offload_wait_ms = 2000;  // how long a write waits for flash to drain
  // Dirty (memory-only) data above this share of the budget is written back
  // to flash in the background, coldest first; 1 disables writeback.
  double dirty_max_fraction = 0.5;
  int64_t promotion_threshold = 2;
  int64_t promotion_max_inflight = 64;
  int64_t promotion_max_inflight_bytes = int64_t{16} << 20;
  bool promotion_on_hit = true;
  int64_t promotion_workers = 4;  // the store's background pool
  // prefetch (see docs/prefetch.md)
  bool exists_prefetch = false;  // plain EXISTS is a prefetch signal
  std::vector<SuffixRewrite> exists_prefetch_map;
  bool demand_kick = false;  // a GET served from flash fires one promotion
  int64_t demand_kick_max_failures = 3;
  int64_t prefetch_dedup_ttl_ms = 30000;
  int64_t prefetch_dedup_max_entries = 65536;
  int64_t prefetch_cooldown_ms = 5000;
  int64_t prefetch_cooldown_max_ms = 60000;
  double prefetch_min_window_share = 0.2;
  // flash reads: chunks read ahead of the consumer, chunk reads in flight
  // per read, and the cap on all flash read buffers of the process
  int64_t flash_read_window = 4;
  int64_t flash_read_inflight = 4;
  int64_t flash_read_buffer = int64_t{256} << 20;
  // the cap on the buffers of all values written to flash as they arrive
  // (SETs larger than large-value-memory-fraction of memory)
  int64_t flash_write_buffer = int64_t{256} << 20;
  // cluster (see docs/cluster.md): Redis Cluster's protocol, with the
  // membership and the slot map in etcd
  bool cluster_enabled = false;
  std::vector<std::string> cluster_etcd = {"http://127.0.0.1:2379"};
  // A secured etcd (etcd_client.h): CA, client certificate and key (PEM
  // files), and a login; empty: not used.
  std::string cluster_etcd_cacert, cluster_etcd_cert, cluster_etcd_key;
  std::string cluster_etcd_user, cluster_etcd_password;
  std::string cluster_name = "tierkv";
  std::string cluster_announce_host;  // empty: bind
  int64_t cluster_announce_port = 0;  // 0: port
  int64_t cluster_weight = 1;
  int64_t cluster_lease_ttl_s = 5;
  bool cluster_controller = true;  // stand for controller (slot assignment)
  int64_t cluster_migrate_batch_keys = 64;
  int64_t cluster_migrate_streams = 4;
  int64_t cluster_migrate_inline_bytes = 4 << 20;
  int64_t cluster_migrate_timeout_ms = 10000;
  // exists-prefetch-map companions owned by other nodes are hinted to them
  // (at most this many keys waiting).
  bool cluster_prefetch_hints = true;
  int64_t cluster_prefetch_hints_pending = 4096;
  int64_t cluster_prefetch_hints_dedup_ms = 1000;  // a key is hinted once per this
  // Where the node keeps the version of the last slot map it served and
  // its unfinished purges (empty: beside the flash file; none without
  // flash, or on a block device).
  std::string cluster_config_file;
  // The login of a node moving keys to another (Redis's names for a
  // replica's login to its master); masterauth empty: requirepass.
  std::string masteruser;
  std::string masterauth;
  // TLS, as Redis's tls-* keys (docs/security.md); tls_port 0: no TLS.
  int64_t tls_port = 0;
  std::string tls_cert_file, tls_key_file, tls_key_file_pass;
  std::string tls_ca_cert_file, tls_ca_cert_dir;
  TlsAuthClients tls_auth_clients = TlsAuthClients::kYes;
  std::string tls_protocols;     // e.g. "TLSv1.2 TLSv1.3"; empty: both
  std::string tls_ciphers;       // TLSv1.2 and below; empty: OpenSSL's
  std::string tls_ciphersuites;  // TLSv1.3; empty: OpenSSL's
  bool tls_prefer_server_ciphers = false;
  // The links between cluster nodes (slot moves) use TLS, and the node
  // announces tls-port to clients and peers.
  bool tls_cluster = false;
  // preheat (see docs/preheat.md)
  std::vector<std::string> preheat_sources;  // allowlist of URL prefixes
  int64_t preheat_max_jobs = 2;
  int64_t shutdown_timeout_ms = 10000;
  int64_t preheat_pieces_inflight = 4;
  int64_t preheat_retries = 3;
  int64_t preheat_max_queued = 1024;
  // The preheat jobs' own pool; the cap on all their piece buffers; the
  // files one TIER.PREHEAT PREFIX may start.
  int64_t preheat_workers = 8;
  int64_t preheat_buffer = int64_t{256} << 20;
  int64_t preheat_max_files = 10000;
  // streaming look-ahead (see docs/streaming.md): keys or chunks held ahead
  // of a stream's consumer (0: chosen per stream from the measured flash
  // read latency and the consumer's pace), reads in flight per stream, and
  // the share of the memory budget that look-ahead data may be charged
  int64_t stream_depth = 0;
  int64_t stream_channels = 4;
  double stream_useonce_max_fraction = 0.25;
  // readahead of sequential ranged reads of one object by one connection
  // (see docs/streaming.md): on or off, and the most chunks kept ahead
  bool readahead = true;
  int64_t readahead_max_chunks = 16;
};

// How a runtime-settable key takes effect. The server implements one apply
// function per hook (a switch, so a hook without one does not compile);
// kNone means CONFIG SET refuses the key.
enum class ConfigApply : uint8_t {
  kNone,
  kNetworkLimits,  // read per command or connection from the server's limits
  kMaxClients,     // also raises the open-files limit, or refuses
  kLogLevel,
  kMemoryBudget,
  kObjectLimits,  // max-key-size, max-object-size
  kPromotion,     // promotion-threshold, promotion-max-inflight, promotion-on-hit
  kPrefetch,      // exists-prefetch*, demand-kick*, prefetch-*
  kOffloadWait,
  kLeaseTtl,
  kLeaseFraction,
  kActiveExpire,
  kMetricsLimits,  // metrics-timeout-ms, metrics-max-clients
  kFlashRead,      // flash-read-window, flash-read-inflight, flash-read-buffer
  kFlashWrite,     // flash-write-buffer
  kDirtyFraction,  // dirty-max-fraction
  kSlowlog,        // slowlog-log-slower-than, slowlog-max-len
  kPreheat,        // preheat-*
  kStream,         // stream-*, readahead, readahead-max-chunks
  kTls,            // tls-*: new connections get a context built from them
};

// How a key's value is written. Sizes take units ("64mb"), durations too
// ("10s"; a bare number is in the key's own unit); --help and the example
// file show them that way, CONFIG GET as plain numbers (as Redis does).
enum class ConfigKind : uint8_t {
  kString,
  kInt,
  kBytes,
  kMillis,   // a duration in ms
  kSeconds,  // a duration in s
  kDouble,
  kBool,    // yes / no
  kChoice,  // one of a few names
  kList,    // comma-separated rules
};

// One configuration key, as the table describes it.
struct ConfigKey {
  std::string_view name;
  std::string_view help;
  ConfigApply apply = ConfigApply::kNone;
  ConfigKind kind = ConfigKind::kString;  // set by the table's key builders
  // Names files, sources or hosts: CONFIG SET only as
  // enable-protected-configs allows (set by guarded()).
  bool guarded = false;
  bool runtime_settable() const { return apply != ConfigApply::kNone; }
};

const std::vector<ConfigKey>& config_keys();
// The table entry of `name` (case-insensitive, '_' means '-'); null if unknown.
const ConfigKey* find_config_key(std::string_view name);

// Sets `name` from text ("64mb", "yes", "lru", ...). Errors name the key.
Status config_set(Config& config, std::string_view name, std::string_view value);
// The current value as CONFIG GET prints it; NotFound for unknown keys.
Result<std::string> config_get(const Config& config, std::string_view name);
// Cross-key checks (chunk size vs object size, budget vs chunk, ...).
Status config_validate(const Config& config);

// Applies a TOML document (keys as in the table, '-' or '_' both accepted).
Status config_apply_toml_file(Config& config, const std::string& path);
Status config_apply_toml_text(Config& config, std::string_view text);

// Parses "1gb", "256MiB", "4k", "1048576" into bytes.
Result<int64_t> parse_byte_size(std::string_view text);
// Parses "500ms", "10s", "5m", "2h" into ms; a bare number is `unit_ms` each.
Result<int64_t> parse_duration_ms(std::string_view text, int64_t unit_ms);
// The shortest exact forms: 1073741824 -> "1gb", 1536 -> "1536b" stays
// "1536"; 10000 ms -> "10s", 90000 ms -> "90s", 0 -> "0".
std::string format_byte_size(int64_t bytes);
std::string format_duration_ms(int64_t ms);
// A key's value as people write it (sizes and durations with units); the
// form --help and the example file show. NotFound for unknown keys.
Result<std::string> config_get_human(const Config& config, std::string_view name);
// A commented TOML file with every key, its help and its default
// (packaging/tierkv.toml is this; CI checks that it is in sync).
std::string config_example_toml();

// Builds the whole configuration for a program: defaults, then --config FILE,
// then one --<key> flag per table entry. On --help, returns Unavailable with
// the help text as its message.
Result<Config> load_config(int argc, const char* const* argv, std::string_view program);

}  // namespace tierkv
