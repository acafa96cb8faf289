// The ACL check every command passes before it runs (connection.cc), as
// Redis 7 makes it: the client's user must be allowed the command (or the
// subcommand), and each key the call names as the command uses it (read,
// write; acl_table.h). A refusal is Redis's -NOPERM text, and is logged in
// ACL LOG.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "server/commands/command.h"

namespace tierkv::server {

// "" if `client`'s user may make this call; else the -NOPERM reply, logged
// if `log`. The client first takes its user's newest rules if the users
// changed.
std::string acl_refusal(ServerContext& server, const CommandSpec& spec,
                        std::span<const std::string_view> argv, ClientState& client,
                        bool log = true, std::string_view context = "toplevel");

// Logs a refused AUTH (or HELLO AUTH) of `username` in ACL LOG; `command`
// is the command's name as the client sent it (Redis logs it so).
void acl_log_failed_auth(ServerContext& server, const ClientState& client,
                         std::string_view username, std::string_view command);

// Logs `client` in as `user` (AUTH, HELLO AUTH).
void acl_log_in(ServerContext& server, ClientState& client, std::shared_ptr<const AclUser> user);

}  // namespace tierkv::server
