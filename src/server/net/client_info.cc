#include "server/net/client_info.h"

#include <utility>

namespace tierkv::server {

void ClientInfo::publish(Identity identity) {
  MutexLock lock(mu_);
  identity_ = std::move(identity);
}

ClientInfo::Identity ClientInfo::identity() const {
  MutexLock lock(mu_);
  return identity_;
}

std::string ClientInfo::user() const {
  MutexLock lock(mu_);
  return identity_.user;
}

bool ClientInfo::no_evict() const {
  MutexLock lock(mu_);
  return identity_.no_evict;
}

}  // namespace tierkv::server
