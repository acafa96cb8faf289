// The cross-key rules of a configuration (config_validate): values that
// are each valid alone but not together.
#include <fmt/format.h>

#include <bit>

#include "core/config.h"
#include "core/config_internal.h"

namespace tierkv {
namespace {

// A node announces where the others and clients reach it, and its id is
// derived from that address: a wildcard would give every node one id.
Status check_announce_host(const Config& c) {
  const bool own = !c.cluster_announce_host.empty();
  const std::string& host = own ? c.cluster_announce_host : c.bind;
  for (std::string_view wildcard : {"", "0.0.0.0", "::", "[::]", "*", "::0"}) {
    if (host != wildcard) continue;
    if (own)
      return Status::invalid_argument(fmt::format(
          "invalid value '{}' for 'cluster-announce-host': no other node can reach it", host));
    return Status::invalid_argument(
        fmt::format("invalid value '{}' for 'bind': with 'cluster-enabled yes' set "
                    "'cluster-announce-host' to an address other nodes can reach",
                    host));
  }
  return Status::ok();
}

}  // namespace

Status config_validate(const Config& c) {
  TIERKV_RETURN_IF_ERROR(check_enum_choices(c));
  if (c.cluster_enabled && c.cluster_etcd.empty())
    return Status::invalid_argument("'cluster-enabled yes' needs 'cluster-etcd' endpoints");
  if (c.tls_cluster && c.tls_port == 0)
    return Status::invalid_argument("'tls-cluster yes' needs a 'tls-port'");
  if (c.cluster_enabled && c.port == 0 && c.cluster_announce_port == 0 && !c.tls_cluster)
    return Status::invalid_argument("'cluster-enabled yes' needs a TCP 'port' to announce");
  if (c.cluster_enabled) TIERKV_RETURN_IF_ERROR(check_announce_host(c));
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
  if (c.flash_write_buffer < c.chunk_size)
    return Status::invalid_argument(
        fmt::format("invalid value '{}' for 'flash-write-buffer': must be at least 'chunk-size'",
                    c.flash_write_buffer));
  if (c.preheat_buffer < c.chunk_size)
    return Status::invalid_argument(
        fmt::format("invalid value '{}' for 'preheat-buffer': must be at least 'chunk-size'",
                    c.preheat_buffer));
  if (c.prefetch_cooldown_max_ms < c.prefetch_cooldown_ms)
    return Status::invalid_argument(fmt::format(
        "invalid value '{}' for 'prefetch-cooldown-max-ms': below 'prefetch-cooldown-ms' ({})",
        c.prefetch_cooldown_max_ms, c.prefetch_cooldown_ms));
  if (c.flash_size != 0 && c.flash_size < 2 * c.region_size)
    return Status::invalid_argument(fmt::format(
        "invalid value '{}' for 'flash-size': must be 0 or at least two regions", c.flash_size));
  return Status::ok();
}

}  // namespace tierkv
