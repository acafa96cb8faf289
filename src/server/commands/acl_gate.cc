#include "server/commands/acl_gate.h"

#include <fmt/format.h>

#include "core/clock.h"

namespace tierkv::server {
namespace {

// CLIENT INFO's shape, as clients parse it (redis-py reads every field);
// what the command path does not know (buffers) reads 0.
std::string client_info(const ClientState& client) {
  const int64_t now = unix_time_ms();
  return fmt::format(
      "id={} addr={} laddr={} fd=0 name={} age={} idle={} flags=N db=0 sub=0 psub=0 ssub=0 "
      "multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 "
      "tot-mem=0 events=r cmd={} user={} redir=-1 resp={}",
      client.id, client.addr, client.laddr, client.name, (now - client.created_ms) / 1000,
      (now - client.last_active_ms) / 1000, client.txn.in_multi ? 0 : -1,
      client.last_command.empty() ? "NULL" : client.last_command,
      client.user ? client.user->name() : "default", client.proto == Proto::kResp3 ? 3 : 2);
}

void log_denial(ServerContext& server, const ClientState& client, std::string_view reason,
                std::string_view object, std::string_view context) {
  server.acl_log().add(
      {std::string(reason), std::string(context), std::string(object), client.user->name(),
       client_info(client)},
      unix_time_ms(),
      static_cast<size_t>(server.limits().acllog_max_len.load(std::memory_order_relaxed)));
}

// What `spec` does with key `i` of `keys`. SET reads its key only with GET
// (Redis's variable key-spec flags).
uint8_t key_need(const AclCommand& entry, const CommandSpec& spec,
                 std::span<const std::string_view> argv, size_t i) {
  uint8_t need = i == 0 ? entry.first_key : entry.other_keys;
  if (spec.name == "set") {
    for (size_t a = 3; a < argv.size(); ++a)
      if (iequals(argv[a], "get")) need |= kNeedRead;
  }
  return need;
}

}  // namespace

std::string acl_refusal(ServerContext& server, const CommandSpec& spec,
                        std::span<const std::string_view> argv, ClientState& client, bool log,
                        std::string_view context) {
  const uint64_t generation = server.acl_users().generation();
  if (client.acl_generation != generation || client.user == nullptr) {
    const std::string name = client.user ? client.user->name() : "default";
    std::shared_ptr<const AclUser> user = server.acl_users().find(name);
    // Gone (ACL LOAD without it; DELUSER closes its connections): no rights.
    client.user = user ? std::move(user) : std::make_shared<const AclUser>(name);
    client.acl_generation = generation;
  }
  const AclUser& user = *client.user;
  if (user.allows_everything()) return {};
  const AclCommand* entry = acl_command_for(spec.acl, argv);
  if (entry == nullptr) return {};
  if (!user.may_run(*entry)) {
    if (log) log_denial(server, client, "command", entry->name, context);
    return fmt::format("NOPERM this user has no permissions to run the '{}' command", entry->name);
  }
  if (user.all_keys() || spec.first_key <= 0) return {};
  const CommandKeys keys = command_keys(spec, argv);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (user.may_access(keys[i], key_need(*entry, spec, argv, i))) continue;
    if (log) log_denial(server, client, "key", keys[i], context);
    return "NOPERM this user has no permissions to access one of the keys used as arguments";
  }
  return {};
}

void acl_log_failed_auth(ServerContext& server, const ClientState& client,
                         std::string_view username, std::string_view command) {
  server.acl_log().add(
      {"auth", "toplevel", std::string(command), std::string(username), client_info(client)},
      unix_time_ms(),
      static_cast<size_t>(server.limits().acllog_max_len.load(std::memory_order_relaxed)));
}

void acl_log_in(ServerContext& server, ClientState& client, std::shared_ptr<const AclUser> user) {
  client.user = std::move(user);
  client.acl_generation = server.acl_users().generation();
  client.authenticated = true;
}

}  // namespace tierkv::server
