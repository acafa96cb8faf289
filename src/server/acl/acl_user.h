// AclUser: one ACL user, as Redis 7 has them (without selectors): whether
// it is on, its passwords (kept as SHA-256 hashes only), the commands it
// may run (by category, command or subcommand) and the keys it may read
// and write (glob patterns, each with R, W or both).
//
// A user is changed only by apply(), one rule at a time, as ACL SETUSER
// reads them; AclUsers (acl_users.h) applies a whole SETUSER to a copy and
// publishes it only if every rule applied. A new user is off, with no
// password, no commands and no keys, as in Redis.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/acl/acl_table.h"

namespace tierkv::server {

class AclUser {
 public:
  explicit AclUser(std::string name);
  // The `default` user of a fresh server: on, nopass, every key and command.
  static AclUser default_user();

  const std::string& name() const { return name_; }

  // Applies one rule ("on", ">pw", "~k*", "+@read", "-config|set", ...).
  // The error's message is Redis's reason, which ACL SETUSER quotes.
  Status apply(std::string_view rule);

  bool enabled() const { return enabled_; }
  bool nopass() const { return nopass_; }
  // Whether `password` logs in as this user (on, and nopass or a match).
  bool authenticates(std::string_view password) const;

  // Whether it may run the entry (acl_command_for's).
  bool may_run(const AclCommand& command) const { return allowed_[acl_command_id(command)]; }
  // Whether it may use `key` as `need` (AclKeyNeed bits) says.
  bool may_access(std::string_view key, uint8_t need) const;
  bool all_keys() const { return all_keys_; }
  // Every command and every key (the default user, as shipped): nothing
  // to look up.
  bool allows_everything() const { return all_keys_ && all_commands_; }

  // The rules as ACL LIST prints them after "user <name> ".
  std::string describe() const;
  // ACL GETUSER's fields.
  std::vector<std::string> flags() const;
  const std::vector<std::string>& password_hashes() const { return password_hashes_; }
  std::string command_rules() const;
  std::string key_rules() const;
  std::string channel_rules() const;

 private:
  struct KeyPattern {
    std::string glob;
    uint8_t allows;  // AclKeyNeed bits
  };
  Status apply_rule(std::string_view rule);
  Status apply_command_rule(std::string_view rule);
  Status apply_key_rule(std::string_view rule);
  Status add_password_hash(std::string hash);
  Status remove_password_hash(std::string_view hash);
  void set_commands(bool allowed);
  void remember_command_rule(std::string rule);

  std::string name_;
  bool enabled_ = false;
  bool nopass_ = false;
  std::vector<std::string> password_hashes_;  // lower-case hex SHA-256, in the order added
  std::vector<bool> allowed_;                 // by acl_command_id
  bool all_commands_ = false;                 // every bit of allowed_ set
  std::vector<std::string> command_rules_;    // first "+@all" or "-@all", then the rules since
  bool all_keys_ = false;
  std::vector<KeyPattern> keys_;
  bool all_channels_ = false;  // no Pub/Sub here: kept so that the rules read back
  std::vector<std::string> channels_;
};

// The lower-case hex SHA-256 of `password`, as ACL stores it.
std::string acl_password_hash(std::string_view password);

}  // namespace tierkv::server
