// What ACL rules know of each command: its categories (Redis 7's for the
// commands Redis has, plus @tier, @preheat and @cluster for ours) and what
// it does with its keys (read, write, or neither), as Redis's key specs
// say. A container's subcommands ("config|set") are entries of their own:
// Redis checks them, not the container, so `-@dangerous` takes CONFIG SET
// while CONFIG HELP stays.
//
// Every command the server registers has an entry here; a unit test
// checks that, so a new command cannot be added without its categories.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace tierkv::server {

enum class AclCategory : uint8_t {
  kKeyspace,
  kRead,
  kWrite,
  kSet,
  kSortedset,
  kList,
  kHash,
  kString,
  kBitmap,
  kHyperloglog,
  kGeo,
  kStream,
  kPubsub,
  kAdmin,
  kFast,
  kSlow,
  kBlocking,
  kDangerous,
  kConnection,
  kTransaction,
  kScripting,
  kTier,
  kPreheat,
  kCluster,
  kCount,
};

// The categories' names, in ACL CAT's order (without '@').
std::span<const std::string_view> acl_category_names();
std::optional<AclCategory> acl_category(std::string_view name);

// What a command needs of the keys it names: R (it returns their data),
// W (it changes them), both, or neither (any pattern that matches will do).
enum AclKeyNeed : uint8_t { kNeedNone = 0, kNeedRead = 1, kNeedWrite = 2 };

struct AclCommand {
  std::string_view name;  // "get", or "config|set" for a subcommand
  uint32_t categories;    // bits by AclCategory
  uint8_t first_key;      // AclKeyNeed of its first key
  uint8_t other_keys;     // and of the others (COPY's destination, BITOP's sources)
  bool has(AclCategory c) const { return categories & (1u << static_cast<unsigned>(c)); }
};

// Every entry, commands and subcommands, in a fixed order: an entry's
// position is its id (AclUser keeps a bit per id).
std::span<const AclCommand> acl_commands();
// The entry of a lower-case name ("get", "config|set"); null if none.
const AclCommand* acl_command(std::string_view name);
size_t acl_command_id(const AclCommand& command);
// The entry a call is checked against: the subcommand's when `command`
// has subcommands and argv[1] names one, else the command's own.
const AclCommand* acl_command_for(std::string_view command, std::span<const std::string_view> argv);
// The same from the command's own entry (null: none).
const AclCommand* acl_command_for(const AclCommand* command,
                                  std::span<const std::string_view> argv);
// The subcommand entries of a container (empty for a plain command).
std::span<const AclCommand> acl_subcommands(const AclCommand& container);

}  // namespace tierkv::server
