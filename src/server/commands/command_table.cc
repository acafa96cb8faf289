// The command table, Redis's shared error texts and argument parsers, and
// the server-wide context.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "server/acl/acl_table.h"
#include "server/commands/command.h"
#include "server/commands/transaction.h"
#include "server/net/hardening.h"

namespace tierkv::server {
namespace {

// ASCII only, like Redis's strcasecmp on command names; std::tolower asks
// the locale for every byte, and this runs for every command's name.
char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c | 0x20) : c;
}

}  // namespace

void register_all_commands(CommandTable& t) {
  register_connection_commands(t);
  register_client_commands(t);
  register_server_commands(t);
  register_string_commands(t);
  register_counter_commands(t);
  register_key_commands(t);
  register_bit_commands(t);
  register_lcs_commands(t);
  register_bitfield_commands(t);
  register_tier_commands(t);
  register_stream_commands(t);
  register_txn_commands(t);
  register_rename_commands(t);
  register_object_commands(t);
  register_slowlog_commands(t);
  register_acl_commands(t);
  register_cluster_commands(t);
  register_preheat_commands(t);
}

void CommandTable::add(const CommandSpec& added) {
  CommandSpec spec = added;
  spec.acl = acl_command(spec.name);
  std::string key(spec.name);
  for (char& c : key) c = lower(c);
  auto it = by_name_.find(key);
  if (it != by_name_.end()) {
    specs_[it->second] = spec;
    return;
  }
  by_name_.emplace(std::move(key), specs_.size());
  specs_.push_back(spec);
}

const CommandSpec* CommandTable::find(std::string_view name) const {
  // Lower-case into a stack buffer: lookups happen once per command.
  char buf[64];
  if (name.size() > sizeof(buf)) return nullptr;  // no command name is that long
  for (size_t i = 0; i < name.size(); ++i) buf[i] = lower(name[i]);
  auto it = by_name_.find(absl::string_view(buf, name.size()));
  return it == by_name_.end() ? nullptr : &specs_[it->second];
}

bool runs_while_loading(const CommandSpec& spec, const Invocation& inv) {
  if (!(spec.flags & kLoadingOk)) return false;
  return spec.loading_ok_if == nullptr || spec.loading_ok_if(inv);
}

namespace errors {

std::string wrong_arity(std::string_view command) {
  return fmt::format("ERR wrong number of arguments for '{}' command", command);
}

// Redis: "unknown command '%.128s', with args beginning with: " followed by
// each argument as "'%.*s' " while fewer than 128 bytes were written.
std::string unknown_command(const Invocation& inv) {
  std::string args;
  for (size_t i = 1; i < inv.argv.size() && args.size() < 128; ++i) {
    std::string_view a = inv.argv[i].substr(0, 128 - args.size());
    args += '\'';
    args.append(a);
    args += "' ";
  }
  std::string_view name = inv.argv.empty() ? std::string_view() : inv.argv[0].substr(0, 128);
  return fmt::format("ERR unknown command '{}', with args beginning with: {}", name, args);
}

std::string invalid_expire(std::string_view command) {
  return fmt::format("ERR invalid expire time in '{}' command", command);
}

}  // namespace errors

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

void subcommand_arity_error(CommandContext& ctx, std::string_view parent, std::string_view sub) {
  ctx.reply.error(errors::wrong_arity(fmt::format("{}|{}", parent, sub)));
}

void unknown_subcommand(CommandContext& ctx, std::string_view parent_upper) {
  ctx.reply.error(fmt::format("ERR unknown subcommand '{}'. Try {} HELP.",
                              ctx.arg(1).substr(0, 128), parent_upper));
}

CommandKeys command_keys(const CommandSpec& spec, std::span<const std::string_view> argv) {
  const size_t end = spec.keys_end ? std::min(spec.keys_end(argv), argv.size()) : argv.size();
  CommandKeys keys;
  for_each_key_index(spec, end, [&](size_t i) { keys.push_back(argv[i]); });
  return keys;
}

void help_reply(CommandContext& ctx, std::initializer_list<std::string_view> lines) {
  ctx.reply.array(lines.size());
  for (std::string_view l : lines) ctx.reply.simple(l);
}

ServerContext::ServerContext(Config config, Store& store, MetricsRegistry& metrics)
    : config_(std::move(config)),
      store_(store),
      metrics_(metrics),
      hints_received_(metrics),
      start_time_ms_(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count()) {
  acl_users_.set_requirepass(config_.requirepass);
  publish_limits();
  constexpr std::pair<cluster::Route::Kind, const char*> kRefusals[] = {
      {cluster::Route::Kind::kServe, "served"},     {cluster::Route::Kind::kMoved, "moved"},
      {cluster::Route::Kind::kAsk, "ask"},          {cluster::Route::Kind::kCrossSlot, "crossslot"},
      {cluster::Route::Kind::kDown, "down"},        {cluster::Route::Kind::kUnserved, "unserved"},
      {cluster::Route::Kind::kTryAgain, "tryagain"}};
  for (const auto& [kind, name] : kRefusals) {
    cluster_refusals_[static_cast<size_t>(kind)] =
        &metrics_.counter("tierkv_cluster_refusals_total",
                          "commands answered with a cluster redirection or error, by reply",
                          fmt::format("reply=\"{}\"", name));
  }
  for (Counter** c : {&keys_migrated_in_, &keys_migrated_out_}) {
    *c = &metrics_.counter("tierkv_cluster_keys_migrated_total",
                           "keys moved to or from this node with their slot, by direction",
                           c == &keys_migrated_in_ ? "direction=\"in\"" : "direction=\"out\"");
  }
  for (const bool within : {false, true}) {
    tier_get_misses_[within ? 1 : 0] =
        &metrics_.counter("tierkv_tier_get_bounded_misses_total",
                          "TIER.GET answers of null for a value only flash held in time",
                          within ? "reason=\"within\"" : "reason=\"memory\"");
  }
  slowlog_.configure(config_.slowlog_log_slower_than, config_.slowlog_max_len);
}

void ServerContext::publish_limits() {
  limits_.proto_max_bulk_len.store(config_.proto_max_bulk_len);
  limits_.max_multibulk_args.store(config_.max_multibulk_args);
  limits_.max_inline_len.store(config_.max_inline_len);
  limits_.client_output_buffer_limit.store(config_.client_output_buffer_limit);
  limits_.client_query_buffer_limit.store(config_.client_query_buffer_limit);
  limits_.maxmemory_clients.store(config_.maxmemory_clients);
  limits_.maxclients.store(config_.maxclients);
  limits_.timeout_s.store(config_.timeout_s);
  limits_.max_object_size.store(config_.max_object_size);
  limits_.auth_required.store(!acl_users_.default_open());
  limits_.protected_mode.store(config_.protected_mode);
  limits_.metrics_timeout_ms.store(config_.metrics_timeout_ms);
  limits_.metrics_max_clients.store(config_.metrics_max_clients);
  limits_.acllog_max_len.store(config_.acllog_max_len);
}

Config ServerContext::config() const {
  MutexLock lock(config_mu_);
  return config_;
}

Status ServerContext::set_config(std::string_view key, std::string_view value) {
  size_t failed = 0;
  return set_configs({{key, value}}, &failed);
}

Status ServerContext::set_configs(const std::vector<ConfigPair>& pairs, size_t* failed) {
  MutexLock lock(config_mu_);
  Config next = config_;
  std::vector<std::pair<ConfigApply, size_t>> hooks;  // each once, with its first pair
  for (size_t i = 0; i < pairs.size(); ++i) {
    *failed = i;
    const ConfigKey* spec = find_config_key(pairs[i].first);
    if (spec == nullptr)
      return Status::not_found(fmt::format("unknown option '{}'", pairs[i].first));
    if (!spec->runtime_settable()) return Status::unavailable("can't set immutable config");
    TIERKV_RETURN_IF_ERROR(config_set(next, spec->name, pairs[i].second));
    bool seen = false;
    for (const auto& [hook, index] : hooks) seen = seen || hook == spec->apply;
    if (!seen) hooks.emplace_back(spec->apply, i);
  }
  if (Status st = config_validate(next); !st.is_ok()) {
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (st.message().find(fmt::format("'{}'", pairs[i].first)) != std::string::npos) *failed = i;
    }
    return st;
  }
  for (size_t h = 0; h < hooks.size(); ++h) {
    Status st = apply_config(hooks[h].first, next);
    if (st.is_ok()) continue;
    // Roll back: what was applied goes back to the values in force.
    for (size_t j = 0; j < h; ++j) (void)apply_config(hooks[j].first, config_);
    *failed = hooks[h].second;
    return st;
  }
  // Only a change: CONFIG SET of another key keeps what ACL SETUSER default did.
  if (next.requirepass != config_.requirepass) acl_users_.set_requirepass(next.requirepass);
  if (next.acllog_max_len != config_.acllog_max_len)
    acl_log_.trim(static_cast<size_t>(next.acllog_max_len));
  config_ = std::move(next);
  publish_limits();
  return Status::ok();
}

void ServerContext::acl_changed() {
  limits_.auth_required.store(!acl_users_.default_open());
}

Status ServerContext::load_acl_file() {
  const std::string path = config().aclfile;
  if (path.empty()) return Status::ok();
  TIERKV_RETURN_IF_ERROR(acl_users_.load(path));
  acl_changed();
  return Status::ok();
}

// One apply function per hook, as Redis's config.c has per key. Keys read
// through limits_ take effect in publish_limits(), after this returns OK.
Status ServerContext::apply_config(ConfigApply hook, const Config& next) {
  switch (hook) {
    case ConfigApply::kNone:
      return Status::unavailable("can't set immutable config");
    case ConfigApply::kNetworkLimits:
    case ConfigApply::kMetricsLimits:
      return Status::ok();
    case ConfigApply::kMaxClients:
      return fit_maxclients_to_fd_limit(next);
    case ConfigApply::kLogLevel:
      apply_log_level(next.log_level);
      return Status::ok();
    case ConfigApply::kTls:
      return reload_tls ? reload_tls(next) : Status::ok();
    case ConfigApply::kSlowlog:
      slowlog_.configure(next.slowlog_log_slower_than, next.slowlog_max_len);
      return Status::ok();
    case ConfigApply::kMemoryBudget:
    case ConfigApply::kObjectLimits:
    case ConfigApply::kPromotion:
    case ConfigApply::kPrefetch:
    case ConfigApply::kOffloadWait:
    case ConfigApply::kLeaseTtl:
    case ConfigApply::kLeaseFraction:
    case ConfigApply::kActiveExpire:
    case ConfigApply::kDirtyFraction:
    case ConfigApply::kPreheat:
    case ConfigApply::kFlashRead:
    case ConfigApply::kFlashWrite:
    case ConfigApply::kStream:
      return store_.apply_config(hook, next);
  }
  return Status::internal("unhandled config apply hook");
}

void apply_log_level(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::set_level(spdlog::level::trace);
    case LogLevel::kDebug:
      return spdlog::set_level(spdlog::level::debug);
    case LogLevel::kInfo:
      return spdlog::set_level(spdlog::level::info);
    case LogLevel::kWarn:
      return spdlog::set_level(spdlog::level::warn);
    case LogLevel::kError:
      return spdlog::set_level(spdlog::level::err);
  }
}

}  // namespace tierkv::server
