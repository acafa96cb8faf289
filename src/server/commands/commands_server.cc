// Server commands: COMMAND CONFIG INFO DBSIZE FLUSHDB FLUSHALL TIME SHUTDOWN.
// Replies and error texts follow Redis 7.0.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

#include "server/acl/acl_table.h"
#include "server/commands/command.h"
#include "server/commands/glob.h"

namespace tierkv::server {
namespace {

// Redis spellings of a few tierkv keys, so that tools which read or set them
// (redis-benchmark, monitoring) see the same figures.
struct ConfigAlias {
  std::string_view redis_name, tierkv_name;
};
constexpr ConfigAlias kAliases[] = {{"maxmemory", "memory"}};

// Read-only Redis settings that describe what tierkv is: no RDB snapshots,
// no AOF, one database. redis-benchmark reads the first two at start.
struct FixedSetting {
  std::string_view name, value;
};
constexpr FixedSetting kFixedSettings[] = {{"save", ""}, {"appendonly", "no"}, {"databases", "1"}};

std::string_view canonical_key(std::string_view name) {
  for (const ConfigAlias& a : kAliases) {
    if (iequals(a.redis_name, name)) return a.tierkv_name;
  }
  return name;
}

// --- COMMAND ---

void command_flags(CommandContext& ctx, const CommandSpec& spec) {
  std::vector<std::string_view> flags;
  if (spec.flags & kWrite) flags.push_back("write");
  if (spec.flags & kReadOnly) flags.push_back("readonly");
  if (spec.flags & kAdmin) flags.push_back("admin");
  if (spec.flags & kNoAuth) flags.push_back("no_auth");
  if (spec.flags & kLoadingOk) flags.push_back("loading");
  if (spec.flags & kFast) flags.push_back("fast");
  ctx.reply.set(flags.size());
  for (std::string_view f : flags) ctx.reply.simple(f);
}

// The ACL categories (acl_table.h), in ACL CAT's order as Redis lists them.
void command_categories(CommandContext& ctx, const CommandSpec& spec) {
  const AclCommand* entry = acl_command(spec.name);
  std::vector<std::string> cats;
  for (size_t i = 0; entry != nullptr && i < acl_category_names().size(); ++i) {
    if (entry->has(static_cast<AclCategory>(i)))
      cats.push_back("@" + std::string(acl_category_names()[i]));
  }
  ctx.reply.set(cats.size());
  for (const std::string& c : cats) ctx.reply.simple(c);
}

// One COMMAND INFO entry, in Redis 7's ten-element shape.
void command_entry(CommandContext& ctx, const CommandSpec& spec) {
  ctx.reply.array(10);
  ctx.reply.bulk(spec.name);
  ctx.reply.integer(spec.arity);
  command_flags(ctx, spec);
  ctx.reply.integer(spec.first_key);
  ctx.reply.integer(spec.last_key);
  ctx.reply.integer(spec.key_step);
  command_categories(ctx, spec);
  ctx.reply.set(0);    // tips
  ctx.reply.array(0);  // key specs
  ctx.reply.array(0);  // subcommands
}

void command_docs_entry(CommandContext& ctx, const CommandSpec& spec) {
  ctx.reply.bulk(spec.name);
  ctx.reply.map(3);
  ctx.reply.bulk("summary");
  ctx.reply.bulk(spec.summary);
  ctx.reply.bulk("since");
  ctx.reply.bulk("1.0.0");
  ctx.reply.bulk("group");
  ctx.reply.bulk(spec.name.starts_with("tier.") ? "tierkv" : "generic");
}

void command_command(CommandContext& ctx) {
  const auto& all = ctx.server.commands().all();
  if (ctx.argc() == 1) {
    ctx.reply.array(all.size());
    for (const CommandSpec& s : all) command_entry(ctx, s);
    return;
  }
  std::string_view sub = ctx.arg(1);
  if (iequals(sub, "count")) {
    if (ctx.argc() != 2) return subcommand_arity_error(ctx, "command", "count");
    ctx.reply.integer(static_cast<int64_t>(all.size()));
  } else if (iequals(sub, "info")) {
    if (ctx.argc() == 2) {
      ctx.reply.array(all.size());
      for (const CommandSpec& s : all) command_entry(ctx, s);
      return;
    }
    ctx.reply.array(ctx.argc() - 2);
    for (size_t i = 2; i < ctx.argc(); ++i) {
      const CommandSpec* s = ctx.server.commands().find(ctx.arg(i));
      if (s) {
        command_entry(ctx, *s);
      } else {
        ctx.reply.null_array();
      }
    }
  } else if (iequals(sub, "docs")) {
    if (ctx.argc() == 2) {
      ctx.reply.map(all.size());
      for (const CommandSpec& s : all) command_docs_entry(ctx, s);
      return;
    }
    std::vector<const CommandSpec*> found;
    for (size_t i = 2; i < ctx.argc(); ++i) {
      if (const CommandSpec* s = ctx.server.commands().find(ctx.arg(i))) found.push_back(s);
    }
    ctx.reply.map(found.size());
    for (const CommandSpec* s : found) command_docs_entry(ctx, *s);
  } else if (iequals(sub, "list")) {
    if (ctx.argc() != 2) return subcommand_arity_error(ctx, "command", "list");
    ctx.reply.array(all.size());
    for (const CommandSpec& s : all) ctx.reply.bulk(s.name);
  } else if (iequals(sub, "help")) {
    help_reply(
        ctx, {"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", "(no subcommand)",
              "    Return details about all commands.", "COUNT",
              "    Return the total number of commands in this server.", "LIST",
              "    Return a list of all commands in this server.", "INFO [<command-name> ...]",
              "    Return details about multiple commands.", "DOCS [<command-name> ...]",
              "    Return documentation details about multiple commands.", "HELP",
              "    Print this help."});
  } else {
    unknown_subcommand(ctx, "COMMAND");
  }
}

// --- CONFIG ---

void config_get(CommandContext& ctx) {
  Config config = ctx.server.config();
  std::vector<std::pair<std::string, std::string>> found;
  auto add = [&](std::string_view reported, std::string_view key) {
    for (const auto& [k, v] : found) {
      if (k == reported) return;
    }
    Result<std::string> value = tierkv::config_get(config, key);
    if (value) found.emplace_back(std::string(reported), std::move(*value));
  };
  for (size_t i = 2; i < ctx.argc(); ++i) {
    std::string_view pattern = ctx.arg(i);
    for (const ConfigKey& k : config_keys()) {
      if (glob_match(pattern, k.name)) add(k.name, k.name);
    }
    for (const ConfigAlias& a : kAliases) {
      if (glob_match(pattern, a.redis_name)) add(a.redis_name, a.tierkv_name);
    }
    for (const FixedSetting& f : kFixedSettings) {
      bool seen = false;
      for (const auto& [k, v] : found) seen = seen || k == f.name;
      if (!seen && glob_match(pattern, f.name)) found.emplace_back(f.name, f.value);
    }
  }
  ctx.reply.map(found.size());
  for (const auto& [k, v] : found) {
    ctx.reply.bulk(k);
    ctx.reply.bulk(v);
  }
}

void config_set(CommandContext& ctx) {
  if (ctx.argc() < 4 || ctx.argc() % 2 != 0) {
    ctx.reply.error(
        fmt::format("ERR Unknown option or number of arguments for CONFIG SET - '{}'", ctx.arg(2)));
    return;
  }
  // Unknown keys first, with Redis's text; set_configs() is all or nothing.
  const ProtectedConfigs guard = ctx.server.config().protected_configs;
  const bool may_set_guarded =
      guard == ProtectedConfigs::kYes || (guard == ProtectedConfigs::kLocal && ctx.client.local);
  for (size_t i = 2; i < ctx.argc(); i += 2) {
    const ConfigKey* key = find_config_key(canonical_key(ctx.arg(i)));
    if (key == nullptr) {
      ctx.reply.error(fmt::format("ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                                  ctx.arg(i)));
      return;
    }
    // Checked argument by argument, as Redis does.
    const char* refusal = !key->runtime_settable()           ? "can't set immutable config"
                          : key->guarded && !may_set_guarded ? "can't set protected config"
                                                             : nullptr;
    if (refusal != nullptr) {
      ctx.reply.error(fmt::format("ERR CONFIG SET failed (possibly related to argument '{}') - {}",
                                  ctx.arg(i), refusal));
      return;
    }
  }
  std::vector<ServerContext::ConfigPair> pairs;
  for (size_t i = 2; i < ctx.argc(); i += 2)
    pairs.emplace_back(canonical_key(ctx.arg(i)), ctx.arg(i + 1));
  size_t failed = 0;
  if (Status st = ctx.server.set_configs(pairs, &failed); !st.is_ok()) {
    ctx.reply.error(fmt::format("ERR CONFIG SET failed (possibly related to argument '{}') - {}",
                                ctx.arg(2 + 2 * failed), st.message()));
    return;
  }
  ctx.reply.ok();
}

void config_command(CommandContext& ctx) {
  std::string_view sub = ctx.arg(1);
  if (iequals(sub, "get")) {
    if (ctx.argc() < 3) return subcommand_arity_error(ctx, "config", "get");
    config_get(ctx);
  } else if (iequals(sub, "set")) {
    if (ctx.argc() < 4) return subcommand_arity_error(ctx, "config", "set");
    config_set(ctx);
  } else if (iequals(sub, "resetstat")) {
    if (ctx.argc() != 2) return subcommand_arity_error(ctx, "config", "resetstat");
    ctx.server.metrics().reset_all();
    ctx.reply.ok();
  } else if (iequals(sub, "rewrite")) {
    ctx.reply.error("ERR The server is running without a config file");
  } else if (iequals(sub, "help")) {
    help_reply(ctx,
               {"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", "GET <pattern>",
                "    Return parameters matching the glob-like <pattern> and their values.",
                "SET <directive> <value>", "    Set the configuration <directive> to <value>.",
                "RESETSTAT", "    Reset statistics reported by the INFO command.", "HELP",
                "    Print this help."});
  } else {
    unknown_subcommand(ctx, "CONFIG");
  }
}

// CONFIG runs while loading, as in Redis 7.0, except SET: its apply hooks
// change the Store, which only some calls may touch until it has loaded.
bool config_ok_while_loading(const Invocation& inv) {
  return inv.argv.size() < 2 || !iequals(inv.argv[1], "set");
}

// --- the rest ---

void info_command(CommandContext& ctx) {
  std::string out;
  if (ctx.argc() == 1) {
    out = ctx.server.info_section("");
  } else {
    for (size_t i = 1; i < ctx.argc(); ++i) {
      std::string part = ctx.server.info_section(ctx.arg(i));
      if (part.empty()) continue;
      if (!out.empty()) out += "\r\n";
      out += part;
    }
  }
  ctx.reply.verbatim(out);
}

void dbsize_command(CommandContext& ctx) {
  ctx.reply.integer(static_cast<int64_t>(ctx.store.size()));
}

void flush_command(CommandContext& ctx) {
  if (ctx.argc() > 2 ||
      (ctx.argc() == 2 && !iequals(ctx.arg(1), "async") && !iequals(ctx.arg(1), "sync"))) {
    ctx.reply.error(errors::kSyntax);
    return;
  }
  ctx.store.flush();
  ctx.reply.ok();
}

void time_command(CommandContext& ctx) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  ctx.reply.array(2);
  ctx.reply.bulk(std::to_string(us / 1000000));
  ctx.reply.bulk(std::to_string(us % 1000000));
}

// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]. SAVE (the default) writes the
// objects that only memory holds to flash first; NOSAVE skips that.
void shutdown_command(CommandContext& ctx) {
  bool save = true;
  bool nosave = false, explicit_save = false;
  for (size_t i = 1; i < ctx.argc(); ++i) {
    std::string_view a = ctx.arg(i);
    if (iequals(a, "nosave")) {
      nosave = true;
    } else if (iequals(a, "save")) {
      explicit_save = true;
    } else if (!iequals(a, "now") && !iequals(a, "force")) {
      ctx.reply.error(errors::kSyntax);
      return;
    }
  }
  if (nosave && explicit_save) return ctx.reply.error(errors::kSyntax);
  save = !nosave;
  spdlog::info("SHUTDOWN{} requested by client id={} addr={}", save ? "" : " NOSAVE", ctx.client.id,
               ctx.client.addr);
  // Like Redis, a successful SHUTDOWN sends no reply: the connection closes.
  ctx.client.close_after_reply = true;
  if (ctx.server.request_shutdown) ctx.server.request_shutdown(save);
}

}  // namespace

void register_server_commands(CommandTable& table) {
  table.add({"command", -1, kLoadingOk, 0, 0, 0, command_command, "Details about commands"});
  table.add({"config", -2, kAdmin | kLoadingOk, 0, 0, 0, config_command, "Get or set configuration",
             0, nullptr, config_ok_while_loading});
  table.add({"info", -1, kLoadingOk, 0, 0, 0, info_command, "Server information and statistics"});
  table.add({"dbsize", 1, kReadOnly | kFast, 0, 0, 0, dbsize_command, "Number of keys"});
  table.add({"flushdb", -1, kWrite, 0, 0, 0, flush_command, "Remove every key"});
  table.add({"flushall", -1, kWrite, 0, 0, 0, flush_command, "Remove every key"});
  table.add({"time", 1, kFast | kLoadingOk, 0, 0, 0, time_command, "The server time"});
  table.add({"shutdown", -1, kAdmin | kLoadingOk, 0, 0, 0, shutdown_command, "Stop the server"});
}

}  // namespace tierkv::server
