#include "server/net/client_registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "server/net/connection.h"

namespace tierkv::server {

bool ClientRegistry::add(Connection* c, int64_t max_clients) {
  MutexLock lock(mu_);
  if (static_cast<int64_t>(clients_.size()) >= max_clients) return false;
  clients_.emplace(c->id(), c);
  count_.store(clients_.size(), std::memory_order_relaxed);
  return true;
}

void ClientRegistry::remove(Connection* c) {
  MutexLock lock(mu_);
  clients_.erase(c->id());
  count_.store(clients_.size(), std::memory_order_relaxed);
}

std::vector<std::string> ClientRegistry::lines(int64_t now_ms) const {
  MutexLock lock(mu_);
  std::vector<std::pair<uint64_t, std::string>> lines;
  for (const auto& [id, c] : clients_) lines.emplace_back(id, c->describe(now_ms));
  std::sort(lines.begin(), lines.end());
  std::vector<std::string> out;
  for (auto& [id, line] : lines) out.push_back(std::move(line));
  return out;
}

ClientKillResult ClientRegistry::kill(const ClientKillFilter& filter, uint64_t self_id) {
  ClientKillResult out;
  MutexLock lock(mu_);
  if (filter.match_none) return out;
  for (const auto& [id, c] : clients_) {
    if (filter.id && *filter.id != id) continue;
    if (filter.addr && *filter.addr != c->addr()) continue;
    if (filter.laddr && *filter.laddr != c->laddr()) continue;
    if (filter.user && *filter.user != c->user_name()) continue;
    if (id == self_id) {
      out.matched_self = true;
    } else if (c->kill()) {
      // One already killed is closing: not killed (counted) twice.
      ++out.others;
    }
  }
  return out;
}

void ClientRegistry::evict_over(int64_t limit) {
  MutexLock lock(mu_);
  uint64_t total = 0;
  std::vector<std::pair<uint64_t, Connection*>> evictable;
  for (const auto& [id, c] : clients_) {
    const uint64_t bytes = c->memory_bytes();
    total += bytes;
    if (bytes > 0 && !c->no_evict()) evictable.emplace_back(bytes, c);
  }
  if (total <= static_cast<uint64_t>(limit)) return;
  std::sort(evictable.begin(), evictable.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [bytes, c] : evictable) {
    if (total <= static_cast<uint64_t>(limit)) break;
    if (!c->kill()) continue;
    total -= bytes;
    evicted_.add();
    spdlog::warn(
        "client id={} addr={} closed: it holds {} bytes, and all clients more than "
        "maxmemory-clients ({})",
        c->id(), c->addr(), bytes, limit);
  }
}

}  // namespace tierkv::server
