// Connection commands: PING ECHO HELLO AUTH SELECT QUIT RESET (CLIENT: commands_client.cc).
// Replies and error texts follow Redis 7.0.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "server/commands/acl_gate.h"
#include "server/commands/command.h"
#include "server/observe/info.h"

namespace tierkv::server {
namespace {

constexpr std::string_view kWrongPass =
    "WRONGPASS invalid username-password pair or user is disabled.";

// AUTH's and HELLO AUTH's check: logs the client in, or logs the failure.
bool log_in(CommandContext& ctx, std::string_view user, std::string_view pass) {
  std::shared_ptr<const AclUser> found = ctx.server.acl_users().authenticate(user, pass);
  if (found == nullptr) {
    acl_log_failed_auth(ctx.server, ctx.client, user, ctx.arg(0));
    return false;
  }
  acl_log_in(ctx.server, ctx.client, std::move(found));
  return true;
}

void ping_command(CommandContext& ctx) {
  if (ctx.argc() > 2) {
    ctx.reply.error(errors::wrong_arity("ping"));
  } else if (ctx.argc() == 2) {
    ctx.reply.bulk(ctx.arg(1));
  } else {
    ctx.reply.simple("PONG");
  }
}

void echo_command(CommandContext& ctx) {
  ctx.reply.bulk(ctx.arg(1));
}

void auth_command(CommandContext& ctx) {
  if (ctx.argc() > 3) {
    ctx.reply.error(errors::kSyntax);
    return;
  }
  if (ctx.argc() == 2 && ctx.server.acl_users().default_user()->nopass()) {
    ctx.reply.error(
        "ERR AUTH <password> called without any password configured for the default user. Are "
        "you sure your configuration is correct?");
    return;
  }
  std::string_view user = ctx.argc() == 3 ? ctx.arg(1) : std::string_view("default");
  std::string_view pass = ctx.argc() == 3 ? ctx.arg(2) : ctx.arg(1);
  if (log_in(ctx, user, pass)) {
    ctx.reply.ok();
  } else {
    ctx.reply.error(kWrongPass);
  }
}

void hello_reply(CommandContext& ctx) {
  ctx.reply.map(7);
  ctx.reply.bulk("server");
  ctx.reply.bulk("redis");
  ctx.reply.bulk("version");
  ctx.reply.bulk(kRedisCompatVersion);
  ctx.reply.bulk("proto");
  ctx.reply.integer(static_cast<int64_t>(ctx.client.proto));
  ctx.reply.bulk("id");
  ctx.reply.integer(static_cast<int64_t>(ctx.client.id));
  ctx.reply.bulk("mode");
  ctx.reply.bulk("standalone");
  ctx.reply.bulk("role");
  ctx.reply.bulk("master");
  ctx.reply.bulk("modules");
  ctx.reply.array(0);
}

void hello_command(CommandContext& ctx) {
  int64_t proto = static_cast<int64_t>(ctx.client.proto);
  size_t i = 1;
  if (ctx.argc() >= 2) {
    std::optional<int64_t> v = parse_int64(ctx.arg(1));
    if (!v) {
      ctx.reply.error("ERR Protocol version is not an integer or out of range");
      return;
    }
    if (*v < 2 || *v > 3) {
      ctx.reply.error("NOPROTO unsupported protocol version");
      return;
    }
    proto = *v;
    i = 2;
  }
  std::string_view user, pass, name;
  bool has_auth = false, has_name = false;
  for (; i < ctx.argc(); ++i) {
    size_t more = ctx.argc() - i - 1;
    if (iequals(ctx.arg(i), "auth") && more >= 2) {
      user = ctx.arg(i + 1);
      pass = ctx.arg(i + 2);
      has_auth = true;
      i += 2;
    } else if (iequals(ctx.arg(i), "setname") && more >= 1) {
      name = ctx.arg(i + 1);
      has_name = true;
      i += 1;
    } else {
      ctx.reply.error(fmt::format("ERR Syntax error in HELLO option '{}'", ctx.arg(i)));
      return;
    }
  }
  bool auth_required = ctx.server.limits().auth_required.load(std::memory_order_relaxed);
  if (has_auth && !log_in(ctx, user, pass)) {
    ctx.reply.error(kWrongPass);
    return;
  }
  if (auth_required && !ctx.client.authenticated) {
    ctx.reply.error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
        "AUTH <user> <pass> option can be used to authenticate the client and select the RESP "
        "protocol version at the same time");
    return;
  }
  if (has_name) {
    if (!valid_client_name(name)) {
      ctx.reply.error("ERR Client names cannot contain spaces, newlines or special characters.");
      return;
    }
    ctx.client.name = std::string(name);
  }
  ctx.client.proto = proto == 3 ? Proto::kResp3 : Proto::kResp2;
  ctx.reply.set_proto(ctx.client.proto);
  hello_reply(ctx);
}

void select_command(CommandContext& ctx) {
  std::optional<int64_t> db = parse_int64(ctx.arg(1));
  if (!db) {
    ctx.reply.error(errors::kNotInteger);
  } else if (*db < INT32_MIN || *db > INT32_MAX) {
    ctx.reply.error(errors::kIntRange);
  } else if (*db != 0) {
    ctx.reply.error("ERR DB index is out of range");
  } else {
    ctx.reply.ok();
  }
}

void quit_command(CommandContext& ctx) {
  ctx.client.close_after_reply = true;
  ctx.reply.ok();
}

void reset_command(CommandContext& ctx) {
  ctx.client.proto = Proto::kResp2;
  ctx.reply.set_proto(Proto::kResp2);
  ctx.client.name.clear();
  // As Redis: back to the default user, logged in only if it needs no password.
  ctx.client.user = ctx.server.acl_users().default_user();
  ctx.client.acl_generation = ctx.server.acl_users().generation();
  ctx.client.authenticated = ctx.server.acl_users().default_open();
  ctx.client.txn.clear();  // leaves MULTI, forgets WATCHed keys
  ctx.reply.simple("RESET");
}

}  // namespace

void register_connection_commands(CommandTable& table) {
  // PING runs while loading, unlike Redis's: it is how clients and health
  // checks see that the server is up (issue 13).
  table.add({"ping", -1, kFast | kLoadingOk, 0, 0, 0, ping_command, "Ping the server"});
  table.add({"echo", 2, kFast | kLoadingOk, 0, 0, 0, echo_command, "Return the given string"});
  table.add({"hello", -1, kNoAuth | kFast | kLoadingOk, 0, 0, 0, hello_command,
             "Handshake: protocol version, authentication, client name"});
  table.add({"auth", -2, kNoAuth | kFast | kLoadingOk, 0, 0, 0, auth_command,
             "Authenticate the connection"});
  table.add(
      {"select", 2, kFast | kLoadingOk, 0, 0, 0, select_command, "Change the selected database"});
  table.add({"quit", -1, kNoAuth | kFast | kLoadingOk | kTxnControl, 0, 0, 0, quit_command,
             "Close the connection"});
  table.add({"reset", 1, kNoAuth | kFast | kLoadingOk | kTxnControl, 0, 0, 0, reset_command,
             "Reset the connection"});
}

}  // namespace tierkv::server
