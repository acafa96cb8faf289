#include "server/acl/acl_table.h"

#include <absl/container/flat_hash_map.h>

#include <array>
#include <string>

namespace tierkv::server {
namespace {

constexpr std::array<std::string_view, static_cast<size_t>(AclCategory::kCount)> kCategoryNames = {
    "keyspace",   "read",        "write",     "set",         "sortedset", "list",
    "hash",       "string",      "bitmap",    "hyperloglog", "geo",       "stream",
    "pubsub",     "admin",       "fast",      "slow",        "blocking",  "dangerous",
    "connection", "transaction", "scripting", "tier",        "preheat",   "cluster"};

// name, categories, key needs ("" no keys; "R", "W", "RW", "-" for none;
// two words: the first key's, then the others'). Redis 7's entries come
// from its COMMAND INFO (acl_categories, key_specifications); ours add
// @tier, @preheat and @cluster. SET needs R too with GET only (acl_user.cc).
struct Row {
  std::string_view name, categories, keys;
};
constexpr Row kRows[] = {
    {"acl", "slow", ""},
    {"acl|cat", "slow", ""},
    {"acl|deluser", "admin slow dangerous", ""},
    {"acl|dryrun", "admin slow dangerous", ""},
    {"acl|genpass", "slow", ""},
    {"acl|getuser", "admin slow dangerous", ""},
    {"acl|help", "slow", ""},
    {"acl|list", "admin slow dangerous", ""},
    {"acl|load", "admin slow dangerous", ""},
    {"acl|log", "admin slow dangerous", ""},
    {"acl|save", "admin slow dangerous", ""},
    {"acl|setuser", "admin slow dangerous", ""},
    {"acl|users", "admin slow dangerous", ""},
    {"acl|whoami", "slow", ""},
    {"append", "write string fast", "W"},
    {"asking", "fast connection cluster", ""},
    {"auth", "fast connection", ""},
    {"bitcount", "read bitmap slow", "R"},
    {"bitfield", "write bitmap slow", "RW"},
    {"bitfield_ro", "read bitmap fast", "R"},
    {"bitop", "write bitmap slow", "W R"},
    {"bitpos", "read bitmap slow", "R"},
    {"client", "slow", ""},
    {"client|getname", "slow connection", ""},
    {"client|help", "slow connection", ""},
    {"client|id", "slow connection", ""},
    {"client|info", "slow connection", ""},
    {"client|kill", "admin slow dangerous connection", ""},
    {"client|list", "admin slow dangerous connection", ""},
    {"client|no-evict", "admin slow dangerous connection", ""},
    {"client|no-touch", "slow connection", ""},
    {"client|pause", "admin slow dangerous connection", ""},
    {"client|setinfo", "slow connection", ""},
    {"client|setname", "slow connection", ""},
    {"client|unpause", "admin slow dangerous connection", ""},
    {"cluster", "slow cluster", ""},
    {"cluster|addslots", "admin slow dangerous cluster", ""},
    {"cluster|addslotsrange", "admin slow dangerous cluster", ""},
    {"cluster|bumpepoch", "admin slow dangerous cluster", ""},
    {"cluster|count-failure-reports", "admin slow dangerous cluster", ""},
    {"cluster|countkeysinslot", "slow cluster", ""},
    {"cluster|delslots", "admin slow dangerous cluster", ""},
    {"cluster|delslotsrange", "admin slow dangerous cluster", ""},
    {"cluster|failover", "admin slow dangerous cluster", ""},
    {"cluster|flushslots", "admin slow dangerous cluster", ""},
    {"cluster|forget", "admin slow dangerous cluster", ""},
    {"cluster|getkeysinslot", "slow cluster", ""},
    {"cluster|help", "slow cluster", ""},
    {"cluster|info", "slow cluster", ""},
    {"cluster|keyslot", "slow cluster", ""},
    {"cluster|links", "slow cluster", ""},
    {"cluster|meet", "admin slow dangerous cluster", ""},
    {"cluster|myid", "slow cluster", ""},
    {"cluster|nodes", "slow cluster", ""},
    {"cluster|replicas", "admin slow dangerous cluster", ""},
    {"cluster|replicate", "admin slow dangerous cluster", ""},
    {"cluster|reset", "admin slow dangerous cluster", ""},
    {"cluster|saveconfig", "admin slow dangerous cluster", ""},
    {"cluster|set-config-epoch", "admin slow dangerous cluster", ""},
    {"cluster|setslot", "admin slow dangerous cluster", ""},
    {"cluster|shards", "slow cluster", ""},
    {"cluster|slaves", "admin slow dangerous cluster", ""},
    {"cluster|slots", "slow cluster", ""},
    {"command", "slow connection", ""},
    {"command|count", "slow connection", ""},
    {"command|docs", "slow connection", ""},
    {"command|help", "slow connection", ""},
    {"command|info", "slow connection", ""},
    {"command|list", "slow connection", ""},
    {"config", "slow", ""},
    {"config|get", "admin slow dangerous", ""},
    {"config|help", "slow", ""},
    {"config|resetstat", "admin slow dangerous", ""},
    {"config|rewrite", "admin slow dangerous", ""},
    {"config|set", "admin slow dangerous", ""},
    {"copy", "keyspace write slow", "R W"},
    {"dbsize", "keyspace read fast", ""},
    {"decr", "write string fast", "RW"},
    {"decrby", "write string fast", "RW"},
    {"del", "keyspace write slow", "W"},
    {"discard", "fast transaction", ""},
    {"echo", "fast connection", ""},
    {"exec", "slow transaction", ""},
    {"exists", "keyspace read fast", "-"},
    {"expire", "keyspace write fast", "W"},
    {"expireat", "keyspace write fast", "W"},
    {"expiretime", "keyspace read fast", "R"},
    {"flushall", "keyspace write slow dangerous", ""},
    {"flushdb", "keyspace write slow dangerous", ""},
    {"get", "read string fast", "R"},
    {"getbit", "read bitmap fast", "R"},
    {"getdel", "write string fast", "RW"},
    {"getex", "write string fast", "RW"},
    {"getrange", "read string slow", "R"},
    {"getset", "write string fast", "RW"},
    {"hello", "fast connection", ""},
    {"incr", "write string fast", "RW"},
    {"incrby", "write string fast", "RW"},
    {"incrbyfloat", "write string fast", "RW"},
    {"info", "slow dangerous", ""},
    {"keys", "keyspace read slow dangerous", ""},
    {"lcs", "read string slow", "R"},
    {"memory", "slow", ""},
    {"memory|usage", "read slow", "-"},
    {"mget", "read string fast", "R"},
    {"mset", "write string slow", "W"},
    {"msetnx", "write string slow", "W"},
    {"multi", "fast transaction", ""},
    {"object", "slow", ""},
    {"object|encoding", "keyspace read slow", "-"},
    {"object|freq", "keyspace read slow", "-"},
    {"object|help", "keyspace slow", ""},
    {"object|idletime", "keyspace read slow", "-"},
    {"object|refcount", "keyspace read slow", "-"},
    {"persist", "keyspace write fast", "W"},
    {"pexpire", "keyspace write fast", "W"},
    {"pexpireat", "keyspace write fast", "W"},
    {"pexpiretime", "keyspace read fast", "R"},
    {"ping", "fast connection", ""},
    {"psetex", "write string slow", "W"},
    {"pttl", "keyspace read fast", "R"},
    {"quit", "fast connection", ""},
    {"randomkey", "keyspace read slow", ""},
    {"readonly", "fast connection cluster", ""},
    {"readwrite", "fast connection cluster", ""},
    {"rename", "keyspace write slow", "RW W"},
    {"renamenx", "keyspace write fast", "RW W"},
    {"reset", "fast connection", ""},
    {"scan", "keyspace read slow", ""},
    {"select", "fast connection", ""},
    {"set", "write string slow", "W"},
    {"setbit", "write bitmap slow", "RW"},
    {"setex", "write string slow", "W"},
    {"setnx", "write string fast", "W"},
    {"setrange", "write string slow", "W"},
    {"shutdown", "admin slow dangerous", ""},
    {"slowlog", "slow", ""},
    {"slowlog|get", "admin slow dangerous", ""},
    {"slowlog|help", "slow", ""},
    {"slowlog|len", "admin slow dangerous", ""},
    {"slowlog|reset", "admin slow dangerous", ""},
    {"strlen", "read string fast", "-"},
    {"substr", "read string slow", "R"},
    {"tier.exists", "keyspace read fast tier", "-"},
    {"tier.get", "read string fast tier", "R"},
    {"tier.job", "admin slow preheat tier", ""},
    {"tier.jobs", "admin slow preheat tier", ""},
    {"tier.preheat", "write slow preheat tier", "W"},
    {"tier.prefetch", "read fast tier", ""},
    {"tier.read", "read string slow tier", "R"},
    {"tier.stat", "keyspace read slow tier", "-"},
    {"tier.stream", "read slow tier", "R"},
    {"time", "fast", ""},
    {"touch", "keyspace read fast", "-"},
    {"ttl", "keyspace read fast", "R"},
    {"type", "keyspace read fast", "-"},
    {"unlink", "keyspace write fast", "W"},
    {"unwatch", "fast transaction", ""},
    {"wait", "slow connection", ""},
    {"watch", "fast transaction", "-"},
};

uint8_t need_of(std::string_view word) {
  uint8_t need = kNeedNone;
  if (word.find('R') != std::string_view::npos) need |= kNeedRead;
  if (word.find('W') != std::string_view::npos) need |= kNeedWrite;
  return need;
}

// Splits `text` at spaces.
std::vector<std::string_view> words(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t end = text.find(' ');
    out.push_back(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  }
  return out;
}

struct Table {
  std::vector<AclCommand> commands;
  absl::flat_hash_map<std::string_view, size_t> by_name;
  // Per container id: [first, end) of its subcommands (rows are sorted).
  absl::flat_hash_map<size_t, std::pair<size_t, size_t>> subcommands;

  Table() {
    for (const Row& row : kRows) {
      uint32_t bits = 0;
      for (std::string_view w : words(row.categories))
        bits |= 1u << static_cast<unsigned>(*acl_category(w));
      const std::vector<std::string_view> keys = words(row.keys);
      const uint8_t first = keys.empty() ? uint8_t{kNeedNone} : need_of(keys[0]);
      const uint8_t others = keys.size() > 1 ? need_of(keys[1]) : first;
      by_name.emplace(row.name, commands.size());
      commands.push_back({row.name, bits, first, others});
    }
    for (size_t i = 0; i < commands.size(); ++i) {
      const std::string_view name = commands[i].name;
      const size_t bar = name.find('|');
      if (bar == std::string_view::npos) continue;
      const size_t container = by_name.at(name.substr(0, bar));
      auto [it, fresh] = subcommands.try_emplace(container, i, i + 1);
      if (!fresh) it->second.second = i + 1;
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

std::span<const std::string_view> acl_category_names() {
  return kCategoryNames;
}

std::optional<AclCategory> acl_category(std::string_view name) {
  for (size_t i = 0; i < kCategoryNames.size(); ++i)
    if (kCategoryNames[i] == name) return static_cast<AclCategory>(i);
  return std::nullopt;
}

std::span<const AclCommand> acl_commands() {
  return table().commands;
}

const AclCommand* acl_command(std::string_view name) {
  const Table& t = table();
  auto it = t.by_name.find(name);
  return it == t.by_name.end() ? nullptr : &t.commands[it->second];
}

size_t acl_command_id(const AclCommand& command) {
  return static_cast<size_t>(&command - table().commands.data());
}

std::span<const AclCommand> acl_subcommands(const AclCommand& container) {
  const Table& t = table();
  auto it = t.subcommands.find(acl_command_id(container));
  if (it == t.subcommands.end()) return {};
  return std::span<const AclCommand>(t.commands)
      .subspan(it->second.first, it->second.second - it->second.first);
}

const AclCommand* acl_command_for(std::string_view command,
                                  std::span<const std::string_view> argv) {
  return acl_command_for(acl_command(command), argv);
}

const AclCommand* acl_command_for(const AclCommand* entry, std::span<const std::string_view> argv) {
  if (entry == nullptr || argv.size() < 2) return entry;
  const size_t prefix = entry->name.size() + 1;
  for (const AclCommand& sub : acl_subcommands(*entry)) {
    const std::string_view sub_name = sub.name.substr(prefix);
    if (sub_name.size() != argv[1].size()) continue;
    bool same = true;
    for (size_t i = 0; same && i < sub_name.size(); ++i)
      same = sub_name[i] == static_cast<char>(std::tolower(static_cast<unsigned char>(argv[1][i])));
    if (same) return &sub;
  }
  return entry;
}

}  // namespace tierkv::server
