// Links between nodes: a connection from this node to another, logged in as
// the cluster's links are, for slot moves (KeySender) and prefetch hints
// (PrefetchHints).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "cluster/slot_map.h"
#include "core/resp_client.h"

namespace tierkv::server {

// How a node logs in on another: masteruser / masterauth (requirepass when
// masterauth is unset), over TLS with tls-cluster.
struct MigratorCredentials {
  std::string user;                 // empty: AUTH password alone (the default user)
  std::string password;             // empty: no AUTH
  std::shared_ptr<ssl_ctx_st> tls;  // tls-cluster: the TLS client context; null: plain
};

// Connects to `peer`, logs in as `login` says and names the connection
// `name` (CLIENT SETNAME). `timeout` bounds the connect and every later
// send or receive. Busy (with the reply) if the peer refused the login; a
// peer that wants no password takes the AUTH as no refusal.
Result<RespClient> connect_peer(const cluster::ClusterNode& peer, const MigratorCredentials& login,
                                std::string_view name, std::chrono::milliseconds timeout);

}  // namespace tierkv::server
