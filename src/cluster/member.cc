#include "cluster/member.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "cluster/etcd_client.h"
#include "core/clock.h"

namespace tierkv::cluster {
namespace {

int64_t steady_ms() {
  return static_cast<int64_t>(mono_ns() / 1'000'000);
}

// Counts what one thread's client did into the member's totals.
class ClientTally {
 public:
  ClientTally(std::atomic<uint64_t>& trips, std::atomic<uint64_t>& failures)
      : trips_(trips), failures_(failures) {}
  void publish(const EtcdClient& client) {
    trips_.fetch_add(client.round_trips() - trips_seen_, std::memory_order_relaxed);
    failures_.fetch_add(client.failures() - failures_seen_, std::memory_order_relaxed);
    trips_seen_ = client.round_trips();
    failures_seen_ = client.failures();
  }

 private:
  std::atomic<uint64_t>& trips_;
  std::atomic<uint64_t>& failures_;
  uint64_t trips_seen_ = 0, failures_seen_ = 0;
};

}  // namespace

std::string cluster_prefix(std::string_view cluster_name) {
  return "/tierkv/" + std::string(cluster_name) + "/";
}

std::string node_key(std::string_view cluster_name, std::string_view node_id) {
  return cluster_prefix(cluster_name) + "nodes/" + std::string(node_id);
}

std::string slot_map_key(std::string_view cluster_name) {
  return cluster_prefix(cluster_name) + "slotmap";
}

std::string node_to_json(const ClusterNode& node) {
  return nlohmann::json{
      {"id", node.id}, {"host", node.host}, {"port", node.port}, {"weight", node.weight}}
      .dump();
}

std::string node_id_for(std::string_view cluster_name, std::string_view host, uint16_t port) {
  const std::string text = fmt::format("{}/{}:{}", cluster_name, host, port);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha1(), nullptr);
  std::string id;
  for (unsigned int i = 0; i < length; ++i) id += fmt::format("{:02x}", digest[i]);
  return id;
}

Result<ClusterNode> node_from_json(std::string_view text) {
  // A map of one node, no slots: SlotMap's parser checks the node.
  const nlohmann::json node = nlohmann::json::parse(text, nullptr, false);
  if (node.is_discarded()) return Status::invalid_argument("node: not JSON");
  const nlohmann::json one{
      {"version", 0}, {"nodes", nlohmann::json::array({node})}, {"slots", nlohmann::json::array()}};
  Result<SlotMap> map = SlotMap::from_json(one.dump());
  if (!map.is_ok()) return map.status();
  return map->nodes().front();
}

Member::Member(MemberOptions options)
    : options_(std::move(options)),
      keeper_([this](std::stop_token stop) { keep(stop); }),
      watcher_([this](std::stop_token stop) { watch(stop); }) {}

Member::~Member() {
  keeper_.request_stop();
  watcher_.request_stop();  // ends their sleeps
  keeper_.join();
  watcher_.join();
  if (lease_ == 0) return;
  if (holds_slots()) {
    // A restart within the TTL finds its slots still its own, with the keys
    // its flash kept; a node that is not coming back should be drained.
    spdlog::info("cluster: leaving with slots; they stay this node's for the lease TTL ({} s)",
                 options_.lease_ttl.count());
    return;
  }
  EtcdClient client({options_.etcd_endpoints, options_.etcd_timeout, options_.etcd_security});
  (void)client.revoke(lease_);
}

bool Member::holds_slots() const {
  std::shared_ptr<const SlotMap> map = this->map();
  const std::optional<size_t> self = map ? map->index_of(options_.self.id) : std::nullopt;
  for (uint32_t s = 0; self && s < kSlotCount; ++s) {
    if (map->held_since(static_cast<uint16_t>(s), *self)) return true;
  }
  return false;
}

bool Member::pause(std::stop_token& stop, std::chrono::milliseconds d) {
  return sleep_unless_stopped(stop, d);
}

void Member::keep(std::stop_token stop) {
  EtcdClient client({options_.etcd_endpoints, options_.etcd_timeout, options_.etcd_security});
  ClientTally tally(round_trips_, failures_);
  const auto every = std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease_ttl) / 3;
  const std::string key = node_key(options_.cluster_name, options_.self.id);
  const std::string value = node_to_json(options_.self);
  int64_t lease = 0;
  while (!stop.stop_requested()) {
    // etcd starts the TTL when it receives the request, after this: the
    // node never believes in its lease longer than etcd does.
    const int64_t sent = steady_ms();
    if (lease == 0) {
      Result<int64_t> granted = client.grant_lease(options_.lease_ttl.count());
      if (granted.is_ok() && client.put(key, value, *granted).is_ok()) {
        lease = *granted;
        {
          MutexLock lock(mu_);
          lease_ = lease;
          // The map may have moved on while the lease was lost: serve only
          // after a read of it that began after this registration.
          registered_at_ms_.store(sent);
          watch_round_.request_stop();
        }
        registrations_.fetch_add(1, std::memory_order_relaxed);
        renewed_at_ms_.store(sent);
        spdlog::info("cluster: registered as {} in '{}' (lease {:x})", options_.self.id,
                     options_.cluster_name, lease);
        // Serving waits for a read of the map after the registration; the
        // watcher's next read may be a whole round away.
        (void)read_map(client);
      }
    } else {
      Result<int64_t> ttl = client.keep_alive(lease);
      if (ttl.is_ok()) {
        renewals_.fetch_add(1, std::memory_order_relaxed);
        renewed_at_ms_.store(sent);
      } else if (ttl.status().code() == StatusCode::kNotFound) {
        spdlog::warn("cluster: lease lost ({}); registering again", ttl.status().to_string());
        lease = 0;
        continue;
      }
    }
    tally.publish(client);
    if (!pause(stop, every)) break;
  }
  tally.publish(client);
}

void Member::watch(std::stop_token stop) {
  EtcdClient client({options_.etcd_endpoints, options_.etcd_timeout, options_.etcd_security});
  ClientTally tally(round_trips_, failures_);
  const std::string key = slot_map_key(options_.cluster_name);
  // Each round reads the map (which confirms it current as of the read's
  // start), then watches it for half a lease TTL at most: a watch on a
  // connection that silently drops traffic ends, and the next read fails.
  const auto round = std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease_ttl) / 2;
  while (!stop.stop_requested()) {
    std::stop_source this_round;
    {
      MutexLock lock(mu_);
      watch_round_ = this_round;
    }
    std::stop_callback forward(stop, [&] { this_round.request_stop(); });
    Result<EtcdRange> now = read_map(client);
    tally.publish(client);
    if (!now.is_ok()) {
      if (!pause(stop, std::chrono::milliseconds(200))) break;
      continue;
    }
    const auto on_events = [&](const std::vector<EtcdEvent>& events) {
      for (const EtcdEvent& e : events)
        if (!e.deleted) offer_map(e.kv.value);
      return true;
    };
    (void)client.watch(key, now->revision + 1, this_round.get_token(), on_events, round);
    tally.publish(client);
  }
}

Result<EtcdRange> Member::read_map(EtcdClient& client) {
  const int64_t sent = steady_ms();
  Result<EtcdRange> now = client.get(slot_map_key(options_.cluster_name));
  if (!now.is_ok()) return now;
  if (!now->kvs.empty()) offer_map(now->kvs[0].value);
  // Two threads read it: the later confirmation stands.
  int64_t seen = map_confirmed_at_ms_.load();
  while (seen < sent && !map_confirmed_at_ms_.compare_exchange_weak(seen, sent)) {
  }
  return now;
}

void Member::offer_map(std::string_view text) {
  Result<SlotMap> parsed = SlotMap::from_json(text);
  if (!parsed.is_ok()) {
    spdlog::error("cluster: slot map refused: {}", parsed.status().to_string());
    return;
  }
  auto next = std::make_shared<const SlotMap>(std::move(*parsed));
  MutexLock lock(mu_);
  if (map_ && map_->version() >= next->version()) return;
  if (options_.before_publish) options_.before_publish(map_.get(), *next);
  map_ = std::move(next);
  maps_seen_.fetch_add(1, std::memory_order_relaxed);
  published_.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<const SlotMap> Member::map() const {
  MutexLock lock(mu_);
  return map_;
}

bool Member::current() const {
  const int64_t now = coarse_mono_ms();
  const int64_t renewed = renewed_at_ms_.load();
  const int64_t confirmed = map_confirmed_at_ms_.load();
  const auto ttl_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease_ttl).count();
  // The coarse clock may lag by a tick: the lease looks current a few ms
  // longer, well inside the controller's own round before it reassigns.
  return renewed != 0 && now - renewed < ttl_ms && confirmed >= registered_at_ms_.load() &&
         now - confirmed < ttl_ms;
}

bool Member::up() const {
  return current() && map() != nullptr;
}

Member::Stats Member::stats() const {
  return {renewals_.load(), registrations_.load(), maps_seen_.load(), round_trips_.load(),
          failures_.load()};
}

}  // namespace tierkv::cluster
