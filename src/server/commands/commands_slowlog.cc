// SLOWLOG GET/LEN/RESET/HELP, with Redis 7.0's replies and error texts, and
// the logging of a finished command (log_slow_command).
#include <fmt/format.h>

#include <limits>
#include <string>
#include <vector>

#include "server/commands/command.h"

namespace tierkv::server {
namespace {

// The arguments Redis shows as "(redacted)": passwords of AUTH, HELLO ...
// AUTH and CONFIG SET requirepass.
std::vector<size_t> redacted_arguments(const CommandSpec& spec,
                                       std::span<const std::string_view> argv) {
  std::vector<size_t> out;
  if (spec.name == "auth") {
    for (size_t i = 1; i < argv.size(); ++i) out.push_back(i);
  } else if (spec.name == "hello") {
    // As HELLO parses: protover, then AUTH user pass and SETNAME name.
    size_t i = 2;
    while (i < argv.size()) {
      size_t more = argv.size() - i - 1;
      if (iequals(argv[i], "auth") && more >= 2) {
        out.push_back(i + 1);
        out.push_back(i + 2);
        i += 3;
      } else if (iequals(argv[i], "setname") && more >= 1) {
        i += 2;
      } else {
        break;
      }
    }
  } else if (spec.name == "config" && argv.size() >= 4 && iequals(argv[1], "set")) {
    for (size_t i = 2; i + 1 < argv.size(); i += 2) {
      if (iequals(argv[i], "requirepass") || iequals(argv[i], "masterauth") ||
          iequals(argv[i], "tls-key-file-pass") || iequals(argv[i], "cluster-etcd-password"))
        out.push_back(i + 1);
    }
  }
  return out;
}

void slowlog_get(CommandContext& ctx) {
  size_t count = 10;
  if (ctx.argc() == 3) {
    std::optional<int64_t> n = parse_int64(ctx.arg(2));
    if (!n || *n < -1) return ctx.reply.error("ERR count should be greater than or equal to -1");
    count = *n == -1 ? std::numeric_limits<size_t>::max() : static_cast<size_t>(*n);
  }
  std::vector<SlowLogEntry> entries = ctx.server.slowlog().newest(count);
  ctx.reply.array(entries.size());
  for (const SlowLogEntry& e : entries) {
    ctx.reply.array(6);
    ctx.reply.integer(static_cast<int64_t>(e.id));
    ctx.reply.integer(e.unix_time_s);
    ctx.reply.integer(e.duration_us);
    ctx.reply.array(e.argv.size());
    for (const std::string& a : e.argv) ctx.reply.bulk(a);
    ctx.reply.bulk(e.addr);
    ctx.reply.bulk(e.name);
  }
}

void slowlog_command(CommandContext& ctx) {
  std::string_view sub = ctx.arg(1);
  if (iequals(sub, "get")) {
    // Redis's own check, after the table's arity of slowlog|get (-2).
    if (ctx.argc() > 3)
      return ctx.reply.error(fmt::format(
          "ERR unknown subcommand or wrong number of arguments for '{}'. Try SLOWLOG HELP.",
          sub.substr(0, 128)));
    slowlog_get(ctx);
  } else if (iequals(sub, "len")) {
    if (ctx.argc() != 2) return subcommand_arity_error(ctx, "slowlog", "len");
    ctx.reply.integer(static_cast<int64_t>(ctx.server.slowlog().size()));
  } else if (iequals(sub, "reset")) {
    if (ctx.argc() != 2) return subcommand_arity_error(ctx, "slowlog", "reset");
    ctx.server.slowlog().reset();
    ctx.reply.ok();
  } else if (iequals(sub, "help")) {
    if (ctx.argc() != 2) return subcommand_arity_error(ctx, "slowlog", "help");
    help_reply(ctx,
               {"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "    Entries are made of:",
                "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                "    client name", "LEN", "    Return the length of the slowlog.", "RESET",
                "    Reset the slowlog.", "HELP", "    Prints this help."});
  } else {
    unknown_subcommand(ctx, "SLOWLOG");
  }
}

}  // namespace

void log_slow_command(ServerContext& server, const CommandSpec& spec,
                      std::span<const std::string_view> argv, uint64_t ns,
                      const ClientState& client) {
  // EXEC is not logged (Redis's skip_slowlog): the commands it ran are.
  if (spec.flags & kRunsQueue) return;
  std::vector<size_t> redact = redacted_arguments(spec, argv);
  server.slowlog().add(argv, ns, client.addr, client.name, redact);
}

void register_slowlog_commands(CommandTable& table) {
  table.add({"slowlog", -2, kAdmin | kLoadingOk, 0, 0, 0, slowlog_command,
             "Read or reset the log of slow commands"});
}

}  // namespace tierkv::server
