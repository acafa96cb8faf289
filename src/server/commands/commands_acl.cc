// ACL: Redis 7.0's ACL command over AclUsers and AclLog (server/acl/),
// without selectors. Replies and error texts follow Redis 7.0.
#include <fmt/format.h>
#include <openssl/rand.h>

#include "core/clock.h"
#include "server/acl/acl_table.h"
#include "server/commands/acl_gate.h"
#include "server/commands/command.h"

namespace tierkv::server {
namespace {

constexpr std::string_view kNoAclFile =
    "ERR This Redis instance is not configured to use an ACL file. You may want to specify users "
    "via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis "
    "configuration file set) in order to store users in the Redis configuration.";

void acl_setuser(CommandContext& ctx) {
  std::vector<std::string_view> rules(ctx.inv.argv.begin() + 3, ctx.inv.argv.end());
  size_t failed = 0;
  Status st = ctx.server.acl_users().set_user(ctx.arg(2), rules, &failed);
  if (!st.is_ok()) {
    if (rules.empty() || st.message().starts_with("Usernames")) {
      ctx.reply.error("ERR " + st.message());
    } else {
      ctx.reply.error(
          fmt::format("ERR Error in ACL SETUSER modifier '{}': {}", rules[failed], st.message()));
    }
    return;
  }
  ctx.server.acl_changed();
  ctx.reply.ok();
}

void acl_deluser(CommandContext& ctx) {
  std::vector<std::string_view> names(ctx.inv.argv.begin() + 2, ctx.inv.argv.end());
  Result<size_t> removed = ctx.server.acl_users().delete_users(names);
  if (!removed.is_ok()) {
    ctx.reply.error("ERR " + removed.status().message());
    return;
  }
  ctx.server.acl_changed();
  // As Redis: the deleted users' connections are closed, this one after its reply.
  for (std::string_view name : names) {
    ClientKillFilter filter;
    filter.user = std::string(name);
    if (ctx.server.kill_clients && ctx.server.kill_clients(filter, ctx.client.id).matched_self)
      ctx.client.close_after_reply = true;
  }
  ctx.reply.integer(static_cast<int64_t>(*removed));
}

void acl_getuser(CommandContext& ctx) {
  std::shared_ptr<const AclUser> user = ctx.server.acl_users().find(ctx.arg(2));
  if (user == nullptr) {
    ctx.reply.null();
    return;
  }
  ctx.reply.map(6);
  ctx.reply.bulk("flags");
  const std::vector<std::string> flags = user->flags();
  ctx.reply.array(flags.size());
  for (const std::string& f : flags) ctx.reply.bulk(f);
  ctx.reply.bulk("passwords");
  ctx.reply.array(user->password_hashes().size());
  for (const std::string& h : user->password_hashes()) ctx.reply.bulk(h);
  ctx.reply.bulk("commands");
  ctx.reply.bulk(user->command_rules());
  ctx.reply.bulk("keys");
  ctx.reply.bulk(user->key_rules());
  ctx.reply.bulk("channels");
  ctx.reply.bulk(user->channel_rules());
  ctx.reply.bulk("selectors");
  ctx.reply.array(0);
}

void acl_cat(CommandContext& ctx) {
  if (ctx.argc() == 2) {
    ctx.reply.array(acl_category_names().size());
    for (std::string_view name : acl_category_names()) ctx.reply.bulk(name);
    return;
  }
  std::string name(ctx.arg(2));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::optional<AclCategory> category = acl_category(name);
  if (!category) {
    ctx.reply.error(fmt::format("ERR Unknown category '{}'", ctx.arg(2)));
    return;
  }
  std::vector<std::string_view> names;
  for (const AclCommand& c : acl_commands())
    if (c.has(*category)) names.push_back(c.name);
  ctx.reply.array(names.size());
  for (std::string_view n : names) ctx.reply.bulk(n);
}

void acl_log(CommandContext& ctx) {
  int64_t count = 10;
  if (ctx.argc() == 3) {
    if (iequals(ctx.arg(2), "reset")) {
      ctx.server.acl_log().reset();
      ctx.reply.ok();
      return;
    }
    std::optional<int64_t> n = parse_int64(ctx.arg(2));
    if (!n) {
      ctx.reply.error(errors::kNotInteger);
      return;
    }
    count = std::max<int64_t>(*n, 0);  // negative: none, as Redis
  }
  const std::vector<AclLogEntry> entries = ctx.server.acl_log().newest(count);
  const int64_t now = unix_time_ms();
  ctx.reply.array(entries.size());
  for (const AclLogEntry& e : entries) {
    ctx.reply.map(7);
    ctx.reply.bulk("count");
    ctx.reply.integer(static_cast<int64_t>(e.count));
    for (const auto& [field, value] :
         {std::pair<std::string_view, std::string_view>{"reason", e.denial.reason},
          {"context", e.denial.context},
          {"object", e.denial.object},
          {"username", e.denial.username}}) {
      ctx.reply.bulk(field);
      ctx.reply.bulk(value);
    }
    ctx.reply.bulk("age-seconds");
    ctx.reply.dbl(static_cast<double>(now - e.created_ms) / 1000.0);
    ctx.reply.bulk("client-info");
    ctx.reply.bulk(e.denial.client_info);
  }
}

void acl_genpass(CommandContext& ctx) {
  int64_t bits = 256;
  if (ctx.argc() == 3) {
    std::optional<int64_t> n = parse_int64(ctx.arg(2));
    if (!n || *n <= 0 || *n > 4096) {
      ctx.reply.error(
          "ERR ACL GENPASS argument must be the number of bits for the output password, a "
          "positive number up to 4096");
      return;
    }
    bits = *n;
  }
  const size_t chars = static_cast<size_t>((bits + 3) / 4);
  std::vector<unsigned char> bytes((chars + 1) / 2);
  RAND_bytes(bytes.data(), static_cast<int>(bytes.size()));
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  hex.resize(chars);
  ctx.reply.bulk(hex);
}

void acl_dryrun(CommandContext& ctx) {
  std::shared_ptr<const AclUser> user = ctx.server.acl_users().find(ctx.arg(2));
  if (user == nullptr) {
    ctx.reply.error(fmt::format("ERR User '{}' not found", ctx.arg(2)));
    return;
  }
  const CommandSpec* spec = ctx.server.commands().find(ctx.arg(3));
  if (spec == nullptr) {
    ctx.reply.error(fmt::format("ERR Command '{}' not found", ctx.arg(3)));
    return;
  }
  std::span<const std::string_view> call(ctx.inv.argv.begin() + 3, ctx.inv.argv.end());
  const int argc = static_cast<int>(call.size());
  if ((spec->arity > 0 && argc != spec->arity) || argc < -spec->arity) {
    ctx.reply.error(fmt::format("ERR wrong number of arguments for '{}' command", spec->name));
    return;
  }
  ClientState as;
  as.user = std::move(user);
  as.acl_generation = ctx.server.acl_users().generation();
  std::string refusal = acl_refusal(ctx.server, *spec, call, as, /*log=*/false);
  if (refusal.empty()) {
    ctx.reply.ok();
  } else {
    // Redis words it for DRYRUN: "This user has no permissions to ...".
    refusal.replace(0, std::string_view("NOPERM this").size(), "This");
    ctx.reply.bulk(refusal);
  }
}

void acl_file_command(CommandContext& ctx, bool save) {
  const std::string path = ctx.server.config().aclfile;
  if (path.empty()) {
    ctx.reply.error(kNoAclFile);
    return;
  }
  Status st = save ? ctx.server.acl_users().save(path) : ctx.server.load_acl_file();
  if (!st.is_ok()) {
    ctx.reply.error("ERR " + st.message());
    return;
  }
  ctx.reply.ok();
}

struct Subcommand {
  std::string_view name;
  int arity;  // as CommandSpec's, counting "ACL" and the subcommand
  void (*run)(CommandContext&);
};

constexpr Subcommand kSubcommands[] = {
    {"setuser", -3, acl_setuser},
    {"deluser", -3, acl_deluser},
    {"getuser", 3, acl_getuser},
    {"cat", -2, acl_cat},
    {"log", -2, acl_log},
    {"genpass", -2, acl_genpass},
    {"dryrun", -4, acl_dryrun},
    {"users", 2,
     [](CommandContext& ctx) {
       const auto users = ctx.server.acl_users().all();
       ctx.reply.array(users.size());
       for (const auto& u : users) ctx.reply.bulk(u->name());
     }},
    {"list", 2,
     [](CommandContext& ctx) {
       const auto lines = ctx.server.acl_users().describe();
       ctx.reply.array(lines.size());
       for (const std::string& l : lines) ctx.reply.bulk(l);
     }},
    {"whoami", 2, [](CommandContext& ctx) { ctx.reply.bulk(ctx.client.user->name()); }},
    {"save", 2, [](CommandContext& ctx) { acl_file_command(ctx, true); }},
    {"load", 2, [](CommandContext& ctx) { acl_file_command(ctx, false); }},
};

void acl_command(CommandContext& ctx) {
  const std::string_view sub = ctx.arg(1);
  if (iequals(sub, "help") && ctx.argc() == 2) {
    help_reply(ctx, {"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                     "CAT [<category>]",
                     "    List all commands that belong to <category>, or all "
                     "command categories when no category is specified.",
                     "DELUSER <username> [<username> ...]",
                     "    Delete a list of users.",
                     "DRYRUN <username> <command> [<arg> ...]",
                     "    Returns whether the user can execute the given command without executing "
                     "the command.",
                     "GETUSER <username>",
                     "    Get the user's details.",
                     "GENPASS [<bits>]",
                     "    Generate a secure 256-bit user password. The optional `bits` argument "
                     "can be used to specify a different size.",
                     "LIST",
                     "    Show users details in config file format.",
                     "LOAD",
                     "    Reload users from the ACL file.",
                     "LOG [<count> | RESET]",
                     "    Show the ACL log entries.",
                     "SAVE",
                     "    Save the current config to the "
                     "ACL file.",
                     "SETUSER <username> <attribute> [<attribute> ...]",
                     "    Create or modify a user with the specified attributes.",
                     "USERS",
                     "    List all the registered usernames.",
                     "WHOAMI",
                     "    Return the current connection username."});
    return;
  }
  for (const Subcommand& s : kSubcommands) {
    if (!iequals(sub, s.name)) continue;
    const int argc = static_cast<int>(ctx.argc());
    if ((s.arity > 0 && argc != s.arity) || argc < -s.arity)
      return subcommand_arity_error(ctx, "acl", s.name);
    s.run(ctx);
    return;
  }
  unknown_subcommand(ctx, "ACL");
}

}  // namespace

void register_acl_commands(CommandTable& table) {
  table.add({"acl", -2, kAdmin | kLoadingOk, 0, 0, 0, acl_command,
             "Users, their passwords, commands and keys (Redis 7's ACL, without selectors)"});
}

}  // namespace tierkv::server
