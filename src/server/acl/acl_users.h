// AclUsers: the server's ACL users by name, and what AUTH checks against.
//
// Users are immutable snapshots: SETUSER applies its rules to a copy and
// publishes the copy only if every rule applied (all or nothing, as Redis
// does), so a connection holding a user never sees half a change. Every
// change bumps generation(): a connection compares it before each command
// and takes its user's newest snapshot when it moved (a deleted user's
// connections are closed, as in Redis).
//
// The `default` user always exists. `requirepass` sets its password (empty:
// nopass), as in Redis. An aclfile holds one "user <name> <rules...>" line
// per user; LOAD replaces every user at once, or none if a line is wrong.
#pragma once

#include <absl/base/thread_annotations.h>

#include <atomic>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "server/acl/acl_user.h"

namespace tierkv::server {

class AclUsers {
 public:
  AclUsers();

  // The default user's password follows it: empty is nopass.
  void set_requirepass(std::string_view password);
  // ACL SETUSER: creates the user if new, then applies `rules` in order.
  // On an error nothing changes; *failed is the index of the rule at fault.
  Status set_user(std::string_view name, std::span<const std::string_view> rules, size_t* failed);
  // Removes the users named; returns how many there were. The default
  // user cannot be removed (InvalidArgument, nothing removed).
  Result<size_t> delete_users(std::span<const std::string_view> names);

  std::shared_ptr<const AclUser> find(std::string_view name) const;
  std::shared_ptr<const AclUser> default_user() const { return find("default"); }
  // Every user, by name.
  std::vector<std::shared_ptr<const AclUser>> all() const;
  // The user `name` if it is on and `password` is its own; null otherwise.
  std::shared_ptr<const AclUser> authenticate(std::string_view name,
                                              std::string_view password) const;
  // True while a new connection starts logged in (default is on, nopass).
  bool default_open() const;
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // ACL LIST's lines, one per user.
  std::vector<std::string> describe() const;
  // Writes describe() to `path` durably / replaces every user with its lines.
  Status save(const std::string& path) const;
  Status load(const std::string& path);

 private:
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<const AclUser>, std::less<>> users_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{1};
};

}  // namespace tierkv::server
