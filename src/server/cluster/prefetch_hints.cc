#include "server/cluster/prefetch_hints.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "core/hash.h"
#include "core/log_throttle.h"

namespace tierkv::server {
namespace {

LogThrottle& link_log() {
  static LogThrottle throttle;
  return throttle;
}

}  // namespace

PrefetchHintsReceived::PrefetchHintsReceived(MetricsRegistry& metrics)
    : received(metrics.counter("tierkv_cluster_prefetch_hints_received_total",
                               "keys named by TIER.PREFETCH (companion hints from other nodes)")),
      ignored(metrics.counter("tierkv_cluster_prefetch_hints_ignored_total",
                              "keys named by TIER.PREFETCH in slots this node does not own")) {}

PrefetchHints::PrefetchHints(PrefetchHintsOptions options, MetricsRegistry& metrics)
    : options_(std::move(options)),
      sent_(metrics.counter("tierkv_cluster_prefetch_hints_sent_total",
                            "companion keys hinted to the node that owns them")),
      dropped_(metrics.counter("tierkv_cluster_prefetch_hints_dropped_total",
                               "companion hints dropped: queue full, link down or refused")),
      deduplicated_(metrics.counter("tierkv_cluster_prefetch_hints_deduplicated_total",
                                    "companion hints not sent: hinted within the dedup window")),
      thread_([this](std::stop_token stop) { run(stop); }) {}

PrefetchHints::~PrefetchHints() {
  thread_.request_stop();
  {
    MutexLock lock(mu_);
    if (sending_ != nullptr) sending_->shutdown();  // a stopped owner holds its reply
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PrefetchHints::recently_hinted(std::string_view key, Clock::time_point now) {
  // Bounded: past a few times max_pending entries the expired ones go, and
  // if none has, all of them (a repeat hint is only wasted work).
  if (recent_.size() >= 4 * options_.max_pending) {
    absl::erase_if(recent_, [now](const auto& e) { return e.second <= now; });
    if (recent_.size() >= 4 * options_.max_pending) recent_.clear();
  }
  auto [it, inserted] = recent_.try_emplace(hash64(key), now + options_.dedup_window);
  if (inserted || it->second <= now) {
    it->second = now + options_.dedup_window;
    return false;
  }
  return true;
}

void PrefetchHints::hint(std::string_view key, const cluster::ClusterNode& owner) {
  {
    MutexLock lock(mu_);
    const Clock::time_point now = Clock::now();
    auto down = down_until_.find(owner.id);
    const bool link_down = down != down_until_.end() && down->second > now;
    if (link_down || waiting_keys_ >= options_.max_pending ||
        thread_.get_stop_token().stop_requested()) {
      dropped_.add();
      return;
    }
    // Only a hint that is queued counts for the window.
    if (recently_hinted(key, now)) {
      deduplicated_.add();
      return;
    }
    Owner& o = waiting_[owner.id];
    o.node = owner;
    o.keys.emplace_back(key);
    ++waiting_keys_;
  }
  wake_.notify_one();
}

PrefetchHints::Stats PrefetchHints::stats() const {
  return Stats{
      .sent = sent_.value(), .dropped = dropped_.value(), .deduplicated = deduplicated_.value()};
}

void PrefetchHints::run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::vector<Owner> batches;
    {
      MutexLock lock(mu_);
      // The destructor takes mu_ between request_stop() and its notify, so
      // a stop never falls between this check and the wait.
      while (waiting_keys_ == 0 && !stop.stop_requested()) wake_.wait(mu_);
      if (stop.stop_requested()) return;
      for (auto& [id, owner] : waiting_) {
        Owner batch{owner.node, {}};
        const size_t n = std::min(owner.keys.size(), options_.batch_keys);
        batch.keys.assign(std::make_move_iterator(owner.keys.begin()),
                          std::make_move_iterator(owner.keys.begin() + static_cast<long>(n)));
        owner.keys.erase(owner.keys.begin(), owner.keys.begin() + static_cast<long>(n));
        waiting_keys_ -= n;
        batches.push_back(std::move(batch));
      }
      absl::erase_if(waiting_, [](const auto& e) { return e.second.keys.empty(); });
    }
    for (const Owner& batch : batches) {
      if (send(batch.node, batch.keys)) {
        sent_.add(batch.keys.size());
        continue;
      }
      dropped_.add(batch.keys.size());
      MutexLock lock(mu_);
      down_until_[batch.node.id] = Clock::now() + options_.retry_pause;
      // Not received: the next probe of these keys hints them again.
      for (const std::string& key : batch.keys) recent_.erase(hash64(key));
    }
  }
}

bool PrefetchHints::send(const cluster::ClusterNode& node, const std::vector<std::string>& keys) {
  std::unique_ptr<RespClient>& link = links_[node.id];
  if (!link) {
    const MigratorCredentials login =
        options_.credentials ? options_.credentials() : MigratorCredentials{};
    Result<RespClient> c = connect_peer(node, login, kPrefetchHintsClientName, options_.io_timeout);
    if (!c.is_ok()) {
      if (auto held = link_log().admit())
        spdlog::warn("prefetch hints: no link to {}:{}: {} ({} more held back)", node.host,
                     node.port, c.status().to_string(), *held);
      return false;
    }
    link = std::make_unique<RespClient>(std::move(*c));
  }
  std::vector<std::string> command;
  command.reserve(keys.size() + 1);
  command.emplace_back("TIER.PREFETCH");
  command.insert(command.end(), keys.begin(), keys.end());
  {
    MutexLock lock(mu_);
    if (thread_.get_stop_token().stop_requested()) return false;
    sending_ = link.get();
  }
  Result<RespValue> reply = link->command(command);
  {
    MutexLock lock(mu_);
    sending_ = nullptr;
  }
  if (reply.is_ok() && reply->type != RespValue::Type::kError) return true;
  if (auto held = link_log().admit())
    spdlog::warn("prefetch hints: {}:{} answered {} ({} more held back)", node.host, node.port,
                 reply.is_ok() ? reply->text : reply.status().to_string(), *held);
  links_.erase(node.id);
  return false;
}

}  // namespace tierkv::server
