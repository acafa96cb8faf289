#include "server/cluster/peer_link.h"

#include <fmt/format.h>

#include <vector>

namespace tierkv::server {

Result<RespClient> connect_peer(const cluster::ClusterNode& peer, const MigratorCredentials& login,
                                std::string_view name, std::chrono::milliseconds timeout) {
  const std::string address = fmt::format("{}:{}", peer.host, peer.port);
  Result<RespClient> c = RespClient::connect(address, timeout, login.tls.get());
  if (!c.is_ok()) return c.status();
  std::vector<std::vector<std::string>> hello;
  if (!login.password.empty()) {
    hello.push_back(login.user.empty()
                        ? std::vector<std::string>{"AUTH", login.password}
                        : std::vector<std::string>{"AUTH", login.user, login.password});
  }
  hello.push_back({"CLIENT", "SETNAME", std::string(name)});
  for (const std::vector<std::string>& command : hello) {
    Result<RespValue> reply = c->command(command);
    if (!reply.is_ok()) return reply.status();
    // A refusal (NOAUTH: masterauth unset; WRONGPASS): the peer spoke.
    // One that wants no password at all is no refusal.
    if (reply->type == RespValue::Type::kError &&
        !reply->text.starts_with("ERR AUTH <password> called without any password"))
      return Status::busy(reply->text);
  }
  return c;
}

}  // namespace tierkv::server
