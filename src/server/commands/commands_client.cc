// CLIENT ID/GETNAME/SETNAME/SETINFO/INFO/LIST/KILL/PAUSE/UNPAUSE/NO-EVICT/
// NO-TOUCH/HELP. Replies and error texts follow Redis 7.0 (NO-TOUCH, from
// Redis 7.2, follows 7.2).
#include <fmt/format.h>

#include <climits>
#include <iterator>
#include <string>

#include "server/commands/command.h"

namespace tierkv::server {
namespace {

void arity_error(CommandContext& ctx, std::string_view sub) {
  subcommand_arity_error(ctx, "client", sub);
}

// Redis's reply when a subcommand's own argument check fails after the
// table's arity check passed.
void syntax_or_arity_error(CommandContext& ctx) {
  ctx.reply.error(
      fmt::format("ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
                  ctx.arg(1).substr(0, 128)));
}

// The own client's CLIENT LIST line, found by id.
std::string own_client_line(CommandContext& ctx) {
  std::string prefix = fmt::format("id={} ", ctx.client.id);
  for (std::string& line : ctx.server.list_clients()) {
    if (line.starts_with(prefix)) return line;
  }
  return prefix;
}

void client_help(CommandContext& ctx) {
  help_reply(ctx, {"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                   "GETNAME",
                   "    Return the name of the current connection.",
                   "ID",
                   "    Return the ID of the current connection.",
                   "INFO",
                   "    Return information about the current client connection.",
                   "KILL <ip:port>",
                   "    Kill connection made from <ip:port>.",
                   "KILL <option> <value> [<option> <value> [...]]",
                   "    Kill connections. Options are:",
                   "    * ADDR (<ip:port>|<unixsocket>:0)",
                   "      Kill connections made from the specified address",
                   "    * LADDR (<ip:port>|<unixsocket>:0)",
                   "      Kill connections made to specified local address",
                   "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
                   "      Kill connections by type.",
                   "    * USER <username>",
                   "      Kill connections authenticated by <username>.",
                   "    * SKIPME (YES|NO)",
                   "      Skip killing current connection (default: yes).",
                   "    * ID <client-id>",
                   "      Kill connections by client id.",
                   "LIST [options ...]",
                   "    Return information about client connections. Options:",
                   "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
                   "      Return clients of specified type.",
                   "UNPAUSE",
                   "    Stop the current client pause, resuming traffic.",
                   "PAUSE <timeout> [WRITE|ALL]",
                   "    Suspend all, or just write, clients for <timeout> milliseconds.",
                   "SETINFO <LIB-NAME|LIB-VER> <value>",
                   "    Set client library name or version.",
                   "SETNAME <name>",
                   "    Assign the name <name> to the current connection.",
                   "NO-EVICT (ON|OFF)",
                   "    Protect current client connection from eviction.",
                   "NO-TOUCH (ON|OFF)",
                   "    Will not touch LRU/LFU stats when this mode is on.",
                   "HELP",
                   "    Prints this help."});
}

void client_setname(CommandContext& ctx) {
  if (ctx.argc() != 3) return arity_error(ctx, "setname");
  if (!valid_client_name(ctx.arg(2)))
    return ctx.reply.error(
        "ERR Client names cannot contain spaces, newlines or special characters.");
  ctx.client.name = std::string(ctx.arg(2));
  ctx.reply.ok();
}

void client_setinfo(CommandContext& ctx) {
  if (ctx.argc() != 4) return arity_error(ctx, "setinfo");
  std::string_view attr = ctx.arg(2);
  bool is_name = iequals(attr, "lib-name");
  if (!is_name && !iequals(attr, "lib-ver"))
    return ctx.reply.error(fmt::format("ERR Unrecognized option '{}'", attr));
  if (!valid_client_name(ctx.arg(3)))
    return ctx.reply.error(
        fmt::format("ERR {} cannot contain spaces, newlines or special characters.",
                    is_name ? "lib-name" : "lib-ver"));
  (is_name ? ctx.client.lib_name : ctx.client.lib_ver) = std::string(ctx.arg(3));
  ctx.reply.ok();
}

void client_list(CommandContext& ctx) {
  // TYPE normal is every client here; other filters are not supported.
  if (ctx.argc() != 2 &&
      !(ctx.argc() == 4 && iequals(ctx.arg(2), "type") && iequals(ctx.arg(3), "normal")))
    return ctx.reply.error(errors::kSyntax);
  std::string out;
  for (const std::string& line : ctx.server.list_clients()) {
    out += line;
    out += '\n';
  }
  ctx.reply.verbatim(out);
}

// One filter of the new form; false after replying an error.
bool parse_kill_filter(CommandContext& ctx, std::string_view opt, std::string_view value,
                       ClientKillFilter& f, bool& skipme) {
  if (iequals(opt, "id")) {
    std::optional<int64_t> id = parse_int64(value);
    if (!id || *id < 1) {
      ctx.reply.error("ERR client-id should be greater than 0");
      return false;
    }
    f.id = static_cast<uint64_t>(*id);
  } else if (iequals(opt, "type")) {
    // Redis's getClientTypeByName; every tierkv client is "normal".
    bool normal = iequals(value, "normal");
    if (!normal && !iequals(value, "master") && !iequals(value, "replica") &&
        !iequals(value, "slave") && !iequals(value, "pubsub")) {
      ctx.reply.error(fmt::format("ERR Unknown client type '{}'", value));
      return false;
    }
    f.match_none = f.match_none || !normal;
  } else if (iequals(opt, "addr")) {
    f.addr = std::string(value);
  } else if (iequals(opt, "laddr")) {
    f.laddr = std::string(value);
  } else if (iequals(opt, "user")) {
    if (ctx.server.acl_users().find(value) == nullptr) {
      ctx.reply.error(fmt::format("ERR No such user '{}'", value));
      return false;
    }
    f.user = std::string(value);
  } else if (iequals(opt, "skipme") && (iequals(value, "yes") || iequals(value, "no"))) {
    skipme = iequals(value, "yes");
  } else {
    ctx.reply.error(errors::kSyntax);
    return false;
  }
  return true;
}

// CLIENT KILL ip:port (OK or "No such client"; may kill the caller) or
// CLIENT KILL <filter> <value> ... (the number killed; SKIPME yes by default).
void client_kill(CommandContext& ctx) {
  if (ctx.argc() < 3) return arity_error(ctx, "kill");
  ClientKillFilter filter;
  bool old_form = ctx.argc() == 3;
  bool skipme = !old_form;
  if (old_form) {
    filter.addr = std::string(ctx.arg(2));
  } else {
    for (size_t i = 2; i < ctx.argc(); i += 2) {
      if (i + 1 >= ctx.argc()) return ctx.reply.error(errors::kSyntax);
      if (!parse_kill_filter(ctx, ctx.arg(i), ctx.arg(i + 1), filter, skipme)) return;
    }
  }
  ClientKillResult r = ctx.server.kill_clients(filter, ctx.client.id);
  bool kill_self = r.matched_self && !skipme;
  size_t killed = r.others + (kill_self ? 1 : 0);
  if (old_form) {
    if (killed == 0) return ctx.reply.error("ERR No such client");
    ctx.reply.ok();
  } else {
    ctx.reply.integer(static_cast<int64_t>(killed));
  }
  // After the reply is queued, as Redis does.
  if (kill_self) ctx.client.close_after_reply = true;
}

void client_pause(CommandContext& ctx) {
  if (ctx.argc() < 3) return arity_error(ctx, "pause");
  if (ctx.argc() > 4) return syntax_or_arity_error(ctx);
  ClientPause::Mode mode = ClientPause::Mode::kAll;
  if (ctx.argc() == 4) {
    if (iequals(ctx.arg(3), "write")) {
      mode = ClientPause::Mode::kWrite;
    } else if (!iequals(ctx.arg(3), "all")) {
      return ctx.reply.error("ERR CLIENT PAUSE mode must be WRITE or ALL");
    }
  }
  std::optional<int64_t> ms = parse_int64(ctx.arg(2));
  if (!ms) return ctx.reply.error("ERR timeout is not an integer or out of range");
  if (*ms < 0) return ctx.reply.error("ERR timeout is negative");
  int64_t now = ClientPause::now_ms();
  int64_t end = *ms > INT64_MAX / 8 - now ? INT64_MAX / 8 : now + *ms;
  ctx.server.client_pause().pause(end, mode);
  if (ctx.server.wake_paused_clients) ctx.server.wake_paused_clients();
  ctx.reply.ok();
}

void client_unpause(CommandContext& ctx) {
  if (ctx.argc() != 2) return arity_error(ctx, "unpause");
  ctx.server.client_pause().unpause();
  if (ctx.server.wake_paused_clients) ctx.server.wake_paused_clients();
  ctx.reply.ok();
}

// CLIENT NO-EVICT / NO-TOUCH on|off.
void client_switch(CommandContext& ctx, std::string_view sub, bool ClientState::*flag) {
  if (ctx.argc() != 3) return arity_error(ctx, sub);
  bool on = iequals(ctx.arg(2), "on");
  if (!on && !iequals(ctx.arg(2), "off")) return ctx.reply.error(errors::kSyntax);
  ctx.client.*flag = on;
  ctx.reply.ok();
}

}  // namespace

bool valid_client_name(std::string_view name) {
  for (char c : name) {
    if (c < '!' || c > '~') return false;
  }
  return true;
}

namespace {

void client_command(CommandContext& ctx) {
  std::string_view sub = ctx.arg(1);
  size_t argc = ctx.argc();
  if (iequals(sub, "id")) {
    if (argc != 2) return arity_error(ctx, "id");
    ctx.reply.integer(static_cast<int64_t>(ctx.client.id));
  } else if (iequals(sub, "getname")) {
    if (argc != 2) return arity_error(ctx, "getname");
    if (ctx.client.name.empty()) return ctx.reply.null();
    ctx.reply.bulk(ctx.client.name);
  } else if (iequals(sub, "setname")) {
    client_setname(ctx);
  } else if (iequals(sub, "setinfo")) {
    client_setinfo(ctx);
  } else if (iequals(sub, "info")) {
    if (argc != 2) return arity_error(ctx, "info");
    ctx.reply.verbatim(own_client_line(ctx) + "\n");
  } else if (iequals(sub, "list")) {
    client_list(ctx);
  } else if (iequals(sub, "kill")) {
    client_kill(ctx);
  } else if (iequals(sub, "pause")) {
    client_pause(ctx);
  } else if (iequals(sub, "unpause")) {
    client_unpause(ctx);
  } else if (iequals(sub, "no-evict")) {
    client_switch(ctx, "no-evict", &ClientState::no_evict);
  } else if (iequals(sub, "no-touch")) {
    client_switch(ctx, "no-touch", &ClientState::no_touch);
  } else if (iequals(sub, "help")) {
    if (argc != 2) return arity_error(ctx, "help");
    client_help(ctx);
  } else {
    unknown_subcommand(ctx, "CLIENT");
  }
}

}  // namespace

void register_client_commands(CommandTable& table) {
  table.add({"client", -2, kLoadingOk, 0, 0, 0, client_command, "Manage client connections"});
}

}  // namespace tierkv::server
