// The configuration key table: each key's parser, validator and CONFIG GET
// text, made by the builders of config_key_kinds.h, and the lookups on it
// (config_set, config_get). The cross-key rules (config_validate) are in
// config_rules.cc; loading from TOML and flags is in config.cc.
#include "core/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <functional>
#include <limits>
#include <optional>

#include "core/config_internal.h"
#include "core/config_key_kinds.h"

namespace tierkv {
namespace {

using namespace config_kinds;  // the key builders

constexpr std::array<std::string_view, 4> kEvictionNames = {"s3fifo", "lru", "clock", "sieve"};
constexpr std::array<std::string_view, 3> kFsyncNames = {"none", "everysec", "always"};
constexpr std::array<std::string_view, 2> kOffloadNames = {"on_evict", "write_through"};
constexpr std::array<std::string_view, 5> kLogNames = {"trace", "debug", "info", "warn", "error"};
constexpr std::array<std::string_view, 3> kProtectedNames = {"no", "yes", "local"};
constexpr std::array<std::string_view, 3> kTlsAuthNames = {"yes", "no", "optional"};

const std::vector<KeySpec>& specs() {
  using A = ConfigApply;
  using C = Config;
  static const std::vector<KeySpec> table = {
      string_key({"bind", "address to listen on"}, &C::bind),
      int_key({"port", "TCP port (0 disables TCP)"}, &C::port, 0, 65535),
      guarded(string_key({"unixsocket", "Unix socket path (empty: none)"}, &C::unixsocket)),
      int_key({"io-threads", "network threads (0: one per core)"}, &C::io_threads, 0, 256),
      int_key({"maxclients", "maximum connected clients", A::kMaxClients}, &C::maxclients, 1,
              1000000),
      int_key({"timeout", "close clients idle this many seconds (0: never)", A::kNetworkLimits},
              &C::timeout_s, 0, kMaxI / 1000, ConfigKind::kSeconds),
      string_key({"requirepass", "password for AUTH (empty: no auth)", A::kNetworkLimits},
                 &C::requirepass),
      guarded(string_key({"aclfile",
                          "file of ACL users, one 'user <name> <rules...>' line each, read at "
                          "start and by ACL LOAD, written by ACL SAVE (empty: none)"},
                         &C::aclfile)),
      int_key({"acllog-max-len", "entries ACL LOG keeps", A::kNetworkLimits}, &C::acllog_max_len, 0,
              1e6),
      bool_key({"protected-mode", "without requirepass, serve only loopback and Unix clients",
                A::kNetworkLimits},
               &C::protected_mode),
      enum_key({"enable-protected-configs",
                "who may CONFIG SET the keys that name files, sources or hosts (preheat-sources, "
                "flash-path, ...): no, yes, or local (loopback and Unix clients)"},
               &C::protected_configs, kProtectedNames),
      bytes_key({"proto-max-bulk-len", "largest bulk string accepted", A::kNetworkLimits},
                &C::proto_max_bulk_len, 1 << 20, kMaxI),
      int_key({"max-multibulk-args", "most arguments in one command", A::kNetworkLimits},
              &C::max_multibulk_args, 1, 1 << 30),
      bytes_key({"max-inline-len", "longest inline command", A::kNetworkLimits}, &C::max_inline_len,
                1024, 1 << 30),
      bytes_key({"client-output-buffer-limit", "bytes queued to one client before it is cut off",
                 A::kNetworkLimits},
                &C::client_output_buffer_limit, 1 << 16, kMaxI),
      bytes_key({"client-query-buffer-limit",
                 "bytes of one command being received (a streamed value counts) before the "
                 "client is closed",
                 A::kNetworkLimits},
                &C::client_query_buffer_limit, 1 << 20, kMaxI),
      bytes_key({"maxmemory-clients",
                 "bytes of all clients' query, output and MULTI buffers together; past it the "
                 "largest clients are closed (0: no limit)",
                 A::kNetworkLimits},
                &C::maxmemory_clients, 0, kMaxI),
      string_key({"metrics-bind", "address of the HTTP /metrics endpoint"}, &C::metrics_bind),
      int_key({"metrics-port", "port of the HTTP /metrics endpoint (0 disables)"}, &C::metrics_port,
              0, 65535),
      millis_key({"metrics-timeout-ms", "close an HTTP client that sent no whole request by then",
                  A::kMetricsLimits},
                 &C::metrics_timeout_ms, 100, 600000),
      int_key({"metrics-max-clients", "HTTP connections at once (more are closed at once)",
               A::kMetricsLimits},
              &C::metrics_max_clients, 1, 10000),
      int_key({"slowlog-log-slower-than",
               "log commands slower than this many microseconds in SLOWLOG (-1: none, 0: all)",
               A::kSlowlog},
              &C::slowlog_log_slower_than, -1, kMaxI),
      int_key({"slowlog-max-len", "entries SLOWLOG keeps", A::kSlowlog}, &C::slowlog_max_len, 0,
              kMaxI),
      enum_key({"log-level", "trace, debug, info, warn, error", A::kLogLevel}, &C::log_level,
               kLogNames),
      bytes_key({"max-key-size", "longest key accepted", A::kObjectLimits}, &C::max_key_size, 1,
                512 << 20),
      bytes_key({"max-object-size", "largest value accepted", A::kObjectLimits},
                &C::max_object_size, 1, kMaxI),
      bytes_key({"chunk-size", "unit of residency and I/O (power of two, 4k..64m)"}, &C::chunk_size,
                4096, 64 << 20),
      bytes_key({"memory", "DRAM budget of the memory tier", A::kMemoryBudget}, &C::memory, 1 << 20,
                kMaxI),
      enum_key({"eviction-policy", "s3fifo, lru, clock or sieve"}, &C::eviction_policy,
               kEvictionNames),
      int_key({"memory-shards", "index shards (power of two)"}, &C::memory_shards, 1, 4096),
      bool_key({"malloc-huge-pages",
                "back the heap with transparent huge pages when the kernel gives them on request "
                "(transparent_hugepage madvise): the server re-executes itself once at start to "
                "set glibc's malloc.hugetlb tunable. A large flash index of small objects loads "
                "several times faster; large values churning through the heap cost about twice "
                "the CPU per operation"},
               &C::malloc_huge_pages),
      double_key(
          {"lease-max-fraction", "share of memory that leases may protect", A::kLeaseFraction},
          &C::lease_max_fraction, 0, 1),
      double_key({"large-value-memory-fraction",
                  "with flash, a value larger than this share of memory is written straight to "
                  "flash and read from there"},
                 &C::large_value_memory_fraction, 0, 1),
      millis_key({"lease-ttl-ms", "default lease length", A::kLeaseTtl}, &C::lease_ttl_ms, 1,
                 kMaxI),
      int_key(
          {"active-expire-hz", "active expiry cycles per second (0: lazy only)", A::kActiveExpire},
          &C::active_expire_hz, 0, 500),
      double_key({"mrc-sample-rate",
                  "share of keys the miss-ratio curves sample at first (0: no curves); lowered "
                  "as mrc-max-bytes needs"},
                 &C::mrc_sample_rate, 0, 1),
      bytes_key({"mrc-max-bytes", "DRAM the miss-ratio curves' models may take"}, &C::mrc_max_bytes,
                4096, int64_t{1} << 30),
      guarded(string_key({"flash-path", "file or block device of the flash tier"}, &C::flash_path)),
      bytes_key({"flash-size", "bytes of flash to use (0: no flash tier)"}, &C::flash_size, 0,
                kMaxI),
      bytes_key({"region-size", "flash region size"}, &C::region_size, 1 << 20, 1 << 30),
      double_key({"flash-snapshot-area",
                  "share of the flash kept for the index snapshot of a clean stop (about 21 B "
                  "per small object)"},
                 &C::flash_snapshot_area, 0.001, 0.5),
      enum_key({"flash-fsync", "when flash writes are fsynced: none, everysec, always"},
               &C::flash_fsync, kFsyncNames),
      int_key({"flash-queue-depth", "flash reads in flight"}, &C::flash_queue_depth, 1, 4096),
      bool_key(
          {"flash-reinsertion", "copy chunks that were hit forward when their region is reclaimed"},
          &C::flash_reinsertion),
      double_key(
          {"flash-reinsertion-share",
           "share of each region reinsertion may copy forward (while copies are read more "
           "often than fresh chunks; a fiftieth otherwise): more keeps more, and writes more"},
          &C::flash_reinsertion_share, 0.01, 0.5),
      bool_key({"flash-preallocate", "allocate the whole flash file at start"},
               &C::flash_preallocate),
      bool_key({"flash-direct-io",
                "O_DIRECT flash I/O where the file system allows it (no: through the page cache)"},
               &C::flash_direct_io),
      bool_key({"flash-page-cache-reads",
                "with buffered flash I/O, a read the page cache holds is copied on the thread "
                "that asked (preadv2 RWF_NOWAIT), without the ring's thread hand-offs"},
               &C::flash_page_cache_reads),
      bytes_key({"flash-write-queue", "bytes accepted for flash but not yet written"},
                &C::flash_write_queue, 1 << 20, kMaxI),
      int_key({"backing-latency-ns", "fixed latency added to every flash read (model knob)"},
              &C::backing_latency_ns, 0, 1e9),
      int_key({"key-load-delay",
               "microseconds the crash scan sleeps per record it loads (tests; as Redis's knob)"},
              &C::key_load_delay_us, 0, 1000000),
      bytes_key({"backing-bandwidth",
                 "bytes per second that flash reads share (model knob; 0: the device's own)"},
                &C::backing_bandwidth, 0, kMaxI),
      enum_key({"offload-policy", "when memory data goes to flash: on_evict, write_through"},
               &C::offload_policy, kOffloadNames),
      millis_key({"offload-wait-ms", "how long a write waits for flash to drain before OOM",
                  A::kOffloadWait},
                 &C::offload_wait_ms, 0, 600000),
      double_key({"dirty-max-fraction",
                  "share of memory that may hold data not yet on flash; above it the coldest "
                  "is written back in the background (1: no writeback)",
                  A::kDirtyFraction},
                 &C::dirty_max_fraction, 0, 1),
      int_key({"promotion-threshold", "flash hits before an object is promoted to memory",
               A::kPromotion},
              &C::promotion_threshold, 1, 255),
      int_key({"promotion-max-inflight", "promotions and prefetches in flight", A::kPromotion},
              &C::promotion_max_inflight, 1, 65536),
      bytes_key({"promotion-max-inflight-bytes",
                 "bytes of objects being promoted at once (one larger object may still go alone)",
                 A::kPromotion},
                &C::promotion_max_inflight_bytes, 1 << 20, kMaxI),
      bool_key({"promotion-on-hit", "promote objects read from flash often enough (yes, no)",
                A::kPromotion},
               &C::promotion_on_hit),
      int_key({"promotion-workers", "threads of the pool that runs promotions and prefetches"},
              &C::promotion_workers, 1, 64),
      bool_key({"exists-prefetch", "plain EXISTS also prefetches flash-only keys", A::kPrefetch},
               &C::exists_prefetch),
      rewrites_key({"exists-prefetch-map",
                    "EXISTS of a key ending in A prefetches the key ending in B instead: "
                    "\"A=B,C=D\" (TOML: a string or an array of strings)",
                    A::kPrefetch},
                   &C::exists_prefetch_map),
      bool_key(
          {"demand-kick", "a GET served from flash fires one promotion of its key", A::kPrefetch},
          &C::demand_kick),
      int_key(
          {"demand-kick-max-failures",
           "kicks that failed for room in a row before kicks obey the cooldown too", A::kPrefetch},
          &C::demand_kick_max_failures, 0, 1e6),
      millis_key({"prefetch-dedup-ttl-ms",
                  "a key prefetched within this long is not prefetched again", A::kPrefetch},
                 &C::prefetch_dedup_ttl_ms, 0, kMaxI),
      int_key(
          {"prefetch-dedup-max-entries", "cap on keys remembered for deduplication", A::kPrefetch},
          &C::prefetch_dedup_max_entries, 16, 1e9),
      millis_key({"prefetch-cooldown-ms", "pause of prefetching after memory was found saturated",
                  A::kPrefetch},
                 &C::prefetch_cooldown_ms, 0, 3.6e6),
      millis_key({"prefetch-cooldown-max-ms",
                  "longest cooldown while prefetches keep failing or going unread", A::kPrefetch},
                 &C::prefetch_cooldown_max_ms, 0, 3.6e7),
      double_key({"prefetch-min-window-share",
                  "skip prefetches while their reads come before this share of a promotion "
                  "is done, on average (0: never skip)",
                  A::kPrefetch},
                 &C::prefetch_min_window_share, 0, 1),
      bool_key({"cluster-enabled",
                "speak Redis Cluster's protocol, with membership and the slot map in etcd"},
               &C::cluster_enabled),
      guarded(list_key(
          {"cluster-etcd", "etcd endpoints of the cluster (http://host:port, comma-separated)"},
          &C::cluster_etcd)),
      guarded(
          string_key({"cluster-etcd-cacert",
                      "CA certificate (PEM) etcd's certificate must chain to (https endpoints)"},
                     &C::cluster_etcd_cacert)),
      guarded(string_key({"cluster-etcd-cert",
                          "this node's client certificate for etcd (PEM; etcd's "
                          "--client-cert-auth)"},
                         &C::cluster_etcd_cert)),
      guarded(string_key({"cluster-etcd-key", "the key of cluster-etcd-cert (PEM)"},
                         &C::cluster_etcd_key)),
      guarded(string_key(
          {"cluster-etcd-user", "etcd user the node logs in as (etcd's auth; empty: none)"},
          &C::cluster_etcd_user)),
      string_key({"cluster-etcd-password", "password of cluster-etcd-user"},
                 &C::cluster_etcd_password),
      string_key({"cluster-name", "the cluster's name: its keys in etcd are under /tierkv/<name>/"},
                 &C::cluster_name),
      string_key({"cluster-announce-host",
                  "address clients are sent to for this node's slots (empty: bind)"},
                 &C::cluster_announce_host),
      int_key({"cluster-announce-port", "port clients are sent to for this node (0: port)"},
              &C::cluster_announce_port, 0, 65535),
      int_key({"cluster-weight",
               "this node's share of the slots relative to the others' (0: none, e.g. to drain)"},
              &C::cluster_weight, 0, 1e12),
      int_key({"cluster-lease-ttl",
               "seconds without reaching etcd after which the node leaves the cluster and "
               "answers -CLUSTERDOWN"},
              &C::cluster_lease_ttl_s, 2, 600, ConfigKind::kSeconds),
      bool_key({"cluster-controller",
                "stand in the election of the controller, which assigns slots to the live nodes "
                "(no: the slot map is written by hand or by other nodes)"},
               &C::cluster_controller),
      int_key({"cluster-migrate-batch-keys",
               "keys a node moving a slot away sends per batch (fenced and pipelined together)"},
              &C::cluster_migrate_batch_keys, 1, 100000),
      int_key({"cluster-migrate-streams",
               "threads a node moving slots away sends batches on at once, each with its own "
               "connection to each target; a key always goes on the same one"},
              &C::cluster_migrate_streams, 1, 64),
      bytes_key({"cluster-migrate-inline-bytes",
                 "values up to this size are pipelined whole when a slot moves; larger ones "
                 "stream alone, 1 MiB at a time"},
                &C::cluster_migrate_inline_bytes, 4096, 1 << 30),
      bool_key({"cluster-prefetch-hints",
                "an exists-prefetch-map companion in a slot another node owns is hinted to that "
                "node, which prefetches it (TIER.PREFETCH)"},
               &C::cluster_prefetch_hints),
      int_key({"cluster-prefetch-hints-pending",
               "companion hints waiting to be sent, for all nodes together; more are dropped"},
              &C::cluster_prefetch_hints_pending, 1, 1 << 20),
      millis_key({"cluster-prefetch-hints-dedup-ms",
                  "a companion hinted to its node is not hinted again for this long"},
                 &C::cluster_prefetch_hints_dedup_ms, 0, 3600000),
      millis_key({"cluster-migrate-timeout-ms",
                  "how long a slot move waits on the new owner's connection before it sends "
                  "the batch again"},
                 &C::cluster_migrate_timeout_ms, 100, 3600000),
      guarded(
          string_key({"cluster-config-file",
                      "file where the node keeps the last slot map version it served, so that a "
                      "restart keeps the keys of slots it held all along (empty: beside the flash "
                      "file)"},
                     &C::cluster_config_file)),
      string_key(
          {"masteruser", "user a node moving slots logs in as on their new owner (empty: default)",
           A::kNetworkLimits},
          &C::masteruser),
      string_key({"masterauth",
                  "password a node moving slots logs in with on their new owner (empty: "
                  "requirepass)",
                  A::kNetworkLimits},
                 &C::masterauth),
      int_key({"tls-port", "TLS port (0: no TLS)"}, &C::tls_port, 0, 65535),
      guarded(string_key({"tls-cert-file", "the server's certificate chain (PEM)", A::kTls},
                         &C::tls_cert_file)),
      guarded(string_key({"tls-key-file", "the certificate's private key (PEM)", A::kTls},
                         &C::tls_key_file)),
      string_key({"tls-key-file-pass", "passphrase of tls-key-file, if it has one", A::kTls},
                 &C::tls_key_file_pass),
      guarded(string_key({"tls-ca-cert-file",
                          "CA certificates clients' certificates are checked "
                          "against (PEM)",
                          A::kTls},
                         &C::tls_ca_cert_file)),
      guarded(
          string_key({"tls-ca-cert-dir",
                      "folder of CA certificates (c_rehash form), as tls-ca-cert-file", A::kTls},
                     &C::tls_ca_cert_dir)),
      enum_key(
          {"tls-auth-clients",
           "whether TLS clients must show a certificate the CA signed: yes, no, optional", A::kTls},
          &C::tls_auth_clients, kTlsAuthNames),
      string_key({"tls-protocols", "TLS versions allowed, e.g. \"TLSv1.2 TLSv1.3\" (empty: both)",
                  A::kTls},
                 &C::tls_protocols),
      string_key(
          {"tls-ciphers", "TLSv1.2 cipher list, OpenSSL's syntax (empty: its default)", A::kTls},
          &C::tls_ciphers),
      string_key({"tls-ciphersuites",
                  "TLSv1.3 cipher suites, OpenSSL's syntax (empty: its default)", A::kTls},
                 &C::tls_ciphersuites),
      bool_key({"tls-cluster",
                "cluster mode: keys move between nodes over TLS, and the node announces tls-port"},
               &C::tls_cluster),
      bool_key({"tls-prefer-server-ciphers", "the server's cipher order wins over the client's",
                A::kTls},
               &C::tls_prefer_server_ciphers),
      guarded(list_key(
          {"preheat-sources",
           "sources TIER.PREHEAT may read, as URL prefixes (file:///dir/, http://host/path/); "
           "empty: preheat is refused",
           A::kPreheat},
          &C::preheat_sources)),
      millis_key({"shutdown-timeout-ms",
                  "at shutdown, how long cancelled preheat jobs may take to end before memory "
                  "is written to flash without them"},
                 &C::shutdown_timeout_ms, 0, 3.6e6),
      int_key(
          {"preheat-max-jobs", "preheat jobs running at once (more wait in a queue)", A::kPreheat},
          &C::preheat_max_jobs, 1, 64),
      int_key({"preheat-pieces-inflight", "pieces of one preheat job fetched at once", A::kPreheat},
              &C::preheat_pieces_inflight, 1, 64),
      int_key({"preheat-retries", "attempts after the first for a piece that fails to fetch",
               A::kPreheat},
              &C::preheat_retries, 0, 100),
      int_key({"preheat-workers",
               "threads that fetch preheat sources and write them to flash (their own pool: "
               "a slow source never holds a promotion worker)"},
              &C::preheat_workers, 1, 64),
      bytes_key({"preheat-buffer",
                 "cap on the piece buffers of all preheat jobs (at least chunk-size; PIECE may "
                 "not exceed it)",
                 A::kPreheat},
                &C::preheat_buffer, 1 << 20, kMaxI),
      int_key(
          {"preheat-max-files",
           "files one TIER.PREHEAT PREFIX may start; a folder with more is refused", A::kPreheat},
          &C::preheat_max_files, 1, 1e7),
      int_key({"preheat-max-queued", "preheat jobs waiting to run; more are refused with -BUSY",
               A::kPreheat},
              &C::preheat_max_queued, 1, 1e6),
      int_key(
          {"flash-read-window", "chunks a flash read holds ahead of its consumer", A::kFlashRead},
          &C::flash_read_window, 1, 4096),
      int_key({"flash-read-inflight", "chunk reads in flight per flash read", A::kFlashRead},
              &C::flash_read_inflight, 1, 4096),
      bytes_key({"flash-read-buffer", "cap on all flash read buffers (at least twice chunk-size)",
                 A::kFlashRead},
                &C::flash_read_buffer, 1 << 20, kMaxI),
      bytes_key({"flash-write-buffer",
                 "cap on the buffers of all values written to flash as they arrive (at least "
                 "chunk-size)",
                 A::kFlashWrite},
                &C::flash_write_buffer, 1 << 20, kMaxI),
      int_key({"stream-depth",
               "keys or chunks a stream keeps read ahead of its consumer (0: from the measured "
               "flash read latency and the consumer's pace)",
               A::kStream},
              &C::stream_depth, 0, 1024),
      int_key({"stream-channels", "reads in flight per stream", A::kStream}, &C::stream_channels, 1,
              256),
      double_key(
          {"stream-useonce-max-fraction",
           "share of the memory budget that stream look-ahead data may be charged", A::kStream},
          &C::stream_useonce_max_fraction, 0, 1),
      bool_key({"readahead",
                "read ahead sequential ranged reads of one flash object (TIER.READ, GETRANGE)",
                A::kStream},
               &C::readahead),
      int_key({"readahead-max-chunks",
               "most chunks readahead keeps ahead of a sequential reader (the window doubles "
               "from its start up to this)",
               A::kStream},
              &C::readahead_max_chunks, 1, 4096),
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

}  // namespace

std::string_view name_of(EvictionPolicyKind v) {
  return kEvictionNames[static_cast<size_t>(v)];
}
std::string_view name_of(FlashFsync v) {
  return kFsyncNames[static_cast<size_t>(v)];
}
std::string_view name_of(OffloadPolicy v) {
  return kOffloadNames[static_cast<size_t>(v)];
}
std::string_view name_of(LogLevel v) {
  return kLogNames[static_cast<size_t>(v)];
}

std::string_view name_of(TlsAuthClients v) {
  return kTlsAuthNames[static_cast<size_t>(v)];
}

std::string_view name_of(ProtectedConfigs v) {
  return kProtectedNames[static_cast<size_t>(v)];
}

const ConfigKey* find_config_key(std::string_view name) {
  const KeySpec* s = find_spec(name);
  return s ? &s->key : nullptr;
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> out;
    for (const auto& s : specs()) out.push_back(s.key);
    return out;
  }();
  return keys;
}

Status config_set(Config& config, std::string_view name, std::string_view value) {
  const KeySpec* s = find_spec(name);
  if (!s) return Status::invalid_argument(fmt::format("unknown configuration key '{}'", name));
  return s->set(config, value);
}

Result<std::string> config_get(const Config& config, std::string_view name) {
  const KeySpec* s = find_spec(name);
  if (!s) return Status::not_found(fmt::format("unknown configuration key '{}'", name));
  return s->get(config);
}

Result<std::string> config_get_human(const Config& config, std::string_view name) {
  const KeySpec* s = find_spec(name);
  if (!s) return Status::not_found(fmt::format("unknown configuration key '{}'", name));
  std::string plain = s->get(config);
  Result<int64_t> n = parse_int(plain);
  switch (s->key.kind) {
    case ConfigKind::kBytes:
      return n ? format_byte_size(*n) : plain;
    case ConfigKind::kMillis:
      return n ? format_duration_ms(*n) : plain;
    case ConfigKind::kSeconds:
      return n ? format_duration_ms(*n * 1000) : plain;
    default:
      return plain;
  }
}

Status check_enum_choices(const Config& c) {
  // An embedded caller may have cast any number into an enumeration.
  if (static_cast<size_t>(c.eviction_policy) >= kEvictionNames.size() ||
      static_cast<size_t>(c.flash_fsync) >= kFsyncNames.size() ||
      static_cast<size_t>(c.offload_policy) >= kOffloadNames.size() ||
      static_cast<size_t>(c.log_level) >= kLogNames.size())
    return Status::invalid_argument(
        "invalid value for 'eviction-policy', 'flash-fsync', 'offload-policy' or 'log-level': "
        "not one of its choices");
  return Status::ok();
}

}  // namespace tierkv
