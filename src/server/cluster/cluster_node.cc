#include "server/cluster/cluster_node.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/clock.h"

namespace tierkv::server {

namespace {

// Beside the flash file, unless set; none without flash (nothing outlives
// the process) or on a raw block device.
std::string cluster_state_path(const Config& config) {
  if (!config.cluster_config_file.empty()) return config.cluster_config_file;
  std::string path = Store::beside_flash(config, ".cluster-state.json");
  if (path.empty() && config.flash_size != 0)
    spdlog::warn(
        "cluster: flash is a block device and cluster-config-file is not set: after a "
        "restart this node's slots start empty");
  return path;
}

cluster::ClusterNode self_of(const Config& config, uint16_t announced_port) {
  const std::string host =
      config.cluster_announce_host.empty() ? config.bind : config.cluster_announce_host;
  const auto port = static_cast<uint16_t>(
      config.cluster_announce_port > 0 ? config.cluster_announce_port : announced_port);
  return {cluster::node_id_for(config.cluster_name, host, port), host, port,
          static_cast<uint64_t>(config.cluster_weight)};
}

SlotMigratorOptions migrator_options(const Config& config, const cluster::EtcdSecurity& security,
                                     const std::string& self_id) {
  SlotMigratorOptions moves;
  moves.etcd_endpoints = config.cluster_etcd;
  moves.etcd_security = security;
  moves.cluster_name = config.cluster_name;
  moves.self_id = self_id;
  moves.batch_keys = static_cast<size_t>(config.cluster_migrate_batch_keys);
  moves.streams = static_cast<size_t>(config.cluster_migrate_streams);
  moves.send.batch_bytes = static_cast<uint64_t>(config.cluster_migrate_inline_bytes);
  moves.send.piece_bytes = std::min<uint64_t>(moves.send.piece_bytes, moves.send.batch_bytes);
  moves.send.io_timeout = std::chrono::milliseconds(config.cluster_migrate_timeout_ms);
  return moves;
}

}  // namespace

ClusterNode::ClusterNode(const Config& config, uint16_t announced_port, Store& store,
                         MetricsRegistry& metrics, Counter& keys_migrated_out,
                         std::function<MigratorCredentials()> peer_login) {
  const cluster::EtcdSecurity security{config.cluster_etcd_cacert, config.cluster_etcd_cert,
                                       config.cluster_etcd_key, config.cluster_etcd_user,
                                       config.cluster_etcd_password};
  cluster::MemberOptions o;
  o.etcd_endpoints = config.cluster_etcd;
  o.etcd_security = security;
  o.cluster_name = config.cluster_name;
  o.self = self_of(config, announced_port);
  o.lease_ttl = std::chrono::seconds(config.cluster_lease_ttl_s);
  purger_ = std::make_unique<SlotPurger>(
      store, SlotPurgerOptions{.cluster_name = config.cluster_name,
                               .self_id = o.self.id,
                               .state_path = cluster_state_path(config)});
  fence_ = std::make_shared<KeyFence>();
  SlotMigratorOptions moves = migrator_options(config, security, o.self.id);
  moves.credentials = peer_login;
  migrator_ = std::make_unique<SlotMigrator>(store, *fence_, keys_migrated_out, std::move(moves));
  // One lease TTL, and a second for the coarse clock and the target's
  // read in flight (handoffs.h).
  handoffs_ = std::make_unique<cluster::Handoffs>(o.lease_ttl + std::chrono::seconds(1));
  o.before_publish = [purger = purger_.get(), migrator = migrator_.get(),
                      handoffs = handoffs_.get(), self_id = o.self.id](
                         const cluster::SlotMap* old, const cluster::SlotMap& next) {
    purger->mark(old, next);
    handoffs->note(old, next, self_id, coarse_mono_ms());
    migrator->on_map(next);
  };
  if (config.cluster_prefetch_hints) {
    PrefetchHintsOptions hints;
    hints.max_pending = static_cast<size_t>(config.cluster_prefetch_hints_pending);
    hints.dedup_window = std::chrono::milliseconds(config.cluster_prefetch_hints_dedup_ms);
    hints.credentials = std::move(peer_login);
    hints_ = std::make_unique<PrefetchHints>(std::move(hints), metrics);
  }
  const std::string self_id = o.self.id;
  member_ = std::make_unique<cluster::Member>(std::move(o));
  if (config.cluster_controller) {
    controller_ = std::make_unique<cluster::Controller>(
        cluster::ControllerOptions{.etcd_endpoints = config.cluster_etcd,
                                   .etcd_security = security,
                                   .cluster_name = config.cluster_name,
                                   .self_id = self_id,
                                   .lease_ttl = std::chrono::seconds(config.cluster_lease_ttl_s)});
  }
}

ClusterNode::~ClusterNode() = default;

}  // namespace tierkv::server
