#include "server/acl/acl_user.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>

#include "server/commands/glob.h"

namespace tierkv::server {
namespace {

constexpr std::string_view kUnknownName = "Unknown command or category name in ACL";
constexpr std::string_view kNoSuchPassword =
    "The password you are trying to remove from the user does not exist";
constexpr std::string_view kBadHash =
    "The password hash must be exactly 64 characters and contain only lowercase hexadecimal "
    "characters";
constexpr std::string_view kAfterAll =
    "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have "
    "any effect. Try 'resetkeys' to start with an empty list of patterns";
constexpr std::string_view kAfterAllChannels =
    "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not "
    "have any effect. Try 'resetchannels' to start with an empty list of channels";

std::string lower(std::string_view text) {
  std::string out(text);
  std::ranges::transform(out, out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool is_hash(std::string_view text) {
  return text.size() == 64 && std::ranges::all_of(text, [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Status rule_error(std::string_view why) {
  return Status::invalid_argument(std::string(why));
}

}  // namespace

std::string acl_password_hash(std::string_view password) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(password.data(), password.size(), digest, &size, EVP_sha256(), nullptr);
  std::string hex;
  hex.reserve(2 * size);
  for (unsigned int i = 0; i < size; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

AclUser::AclUser(std::string name)
    : name_(std::move(name)), allowed_(acl_commands().size(), false), command_rules_{"-@all"} {}

AclUser AclUser::default_user() {
  AclUser user("default");
  for (std::string_view rule : {"on", "nopass", "~*", "&*", "+@all"}) (void)user.apply(rule);
  return user;
}

bool AclUser::authenticates(std::string_view password) const {
  if (!enabled_) return false;
  if (nopass_) return true;
  const std::string hash = acl_password_hash(password);
  bool found = false;
  // Every hash is compared in constant time, as Redis does.
  for (const std::string& h : password_hashes_)
    found |= CRYPTO_memcmp(h.data(), hash.data(), hash.size()) == 0;
  return found;
}

bool AclUser::may_access(std::string_view key, uint8_t need) const {
  if (all_keys_) return true;
  for (const KeyPattern& p : keys_) {
    if ((p.allows & need) == need && glob_match(p.glob, key)) return true;
  }
  return false;
}

Status AclUser::apply(std::string_view rule) {
  Status st = apply_rule(rule);
  all_commands_ = std::find(allowed_.begin(), allowed_.end(), false) == allowed_.end();
  return st;
}

Status AclUser::apply_rule(std::string_view rule) {
  const std::string word = lower(rule);
  if (word == "on") {
    enabled_ = true;
  } else if (word == "off") {
    enabled_ = false;
  } else if (word == "nopass") {
    nopass_ = true;
    password_hashes_.clear();
  } else if (word == "resetpass") {
    nopass_ = false;
    password_hashes_.clear();
  } else if (word == "allkeys" || word == "resetkeys" || rule.starts_with('~') ||
             rule.starts_with('%')) {
    return apply_key_rule(rule);
  } else if (word == "allchannels") {
    all_channels_ = true;
    channels_.clear();
  } else if (word == "resetchannels") {
    all_channels_ = false;
    channels_.clear();
  } else if (rule.starts_with('&')) {
    if (all_channels_) return rule_error(kAfterAllChannels);
    if (rule == "&*") {
      all_channels_ = true;
      channels_.clear();
    } else if (std::ranges::find(channels_, rule.substr(1)) == channels_.end()) {
      channels_.emplace_back(rule.substr(1));
    }
  } else if (rule.starts_with('>')) {
    return add_password_hash(acl_password_hash(rule.substr(1)));
  } else if (rule.starts_with('#')) {
    if (!is_hash(rule.substr(1))) return rule_error(kBadHash);
    return add_password_hash(std::string(rule.substr(1)));
  } else if (rule.starts_with('<')) {
    return remove_password_hash(acl_password_hash(rule.substr(1)));
  } else if (rule.starts_with('!')) {
    if (!is_hash(rule.substr(1))) return rule_error(kBadHash);
    return remove_password_hash(rule.substr(1));
  } else if (word == "reset") {
    for (std::string_view r : {"resetpass", "resetkeys", "resetchannels", "off", "-@all"})
      (void)apply(r);
  } else if (word == "allcommands" || word == "nocommands" || rule.starts_with('+') ||
             rule.starts_with('-')) {
    return apply_command_rule(word);
  } else if (word == "sanitize-payload" || word == "skip-sanitize-payload" ||
             word == "clearselectors") {
    // No RESTORE and no selectors here: nothing to change.
  } else {
    return rule_error("Syntax error");
  }
  return Status::ok();
}

Status AclUser::add_password_hash(std::string hash) {
  nopass_ = false;
  if (std::ranges::find(password_hashes_, hash) == password_hashes_.end())
    password_hashes_.push_back(std::move(hash));
  return Status::ok();
}

Status AclUser::remove_password_hash(std::string_view hash) {
  auto it = std::ranges::find(password_hashes_, hash);
  if (it == password_hashes_.end()) return rule_error(kNoSuchPassword);
  password_hashes_.erase(it);
  nopass_ = false;
  return Status::ok();
}

Status AclUser::apply_key_rule(std::string_view rule) {
  const std::string word = lower(rule);
  if (word == "resetkeys") {
    all_keys_ = false;
    keys_.clear();
    return Status::ok();
  }
  uint8_t allows = kNeedRead | kNeedWrite;
  std::string_view glob;
  if (word == "allkeys") {
    glob = "*";
  } else if (rule.starts_with('~')) {
    glob = rule.substr(1);
  } else {  // %R~, %W~, %RW~
    const size_t tilde = rule.find('~');
    if (tilde == std::string_view::npos || tilde == 1) return rule_error("Syntax error");
    allows = 0;
    for (char c : rule.substr(1, tilde - 1)) {
      if (c == 'R' || c == 'r') {
        allows |= kNeedRead;
      } else if (c == 'W' || c == 'w') {
        allows |= kNeedWrite;
      } else {
        return rule_error("Syntax error");
      }
    }
    glob = rule.substr(tilde + 1);
  }
  if (all_keys_) return rule_error(kAfterAll);
  if (glob == "*" && allows == (kNeedRead | kNeedWrite)) {
    all_keys_ = true;
    keys_.clear();
    return Status::ok();
  }
  for (KeyPattern& p : keys_) {
    if (p.glob == glob) {
      p.allows |= allows;
      return Status::ok();
    }
  }
  keys_.push_back({std::string(glob), allows});
  return Status::ok();
}

void AclUser::set_commands(bool allowed) {
  std::fill(allowed_.begin(), allowed_.end(), allowed);
}

Status AclUser::apply_command_rule(std::string_view rule) {
  if (rule == "allcommands" || rule == "+@all") {
    set_commands(true);
    command_rules_ = {"+@all"};
    return Status::ok();
  }
  if (rule == "nocommands" || rule == "-@all") {
    set_commands(false);
    command_rules_ = {"-@all"};
    return Status::ok();
  }
  const bool allow = rule[0] == '+';
  const std::string_view name = rule.substr(1);
  if (name.starts_with('@')) {
    const std::optional<AclCategory> category = acl_category(name.substr(1));
    if (!category) return rule_error(kUnknownName);
    for (const AclCommand& c : acl_commands())
      if (c.has(*category)) allowed_[acl_command_id(c)] = allow;
    command_rules_.emplace_back(rule);
    return Status::ok();
  }
  const AclCommand* command = acl_command(name);
  if (command == nullptr) return rule_error(kUnknownName);
  allowed_[acl_command_id(*command)] = allow;
  for (const AclCommand& sub : acl_subcommands(*command)) allowed_[acl_command_id(sub)] = allow;
  remember_command_rule(std::string(rule));
  return Status::ok();
}

// A rule on a command replaces the earlier rules on that same command (and
// on its subcommands), so that the list stays as short as Redis's.
void AclUser::remember_command_rule(std::string rule) {
  const std::string_view name = std::string_view(rule).substr(1);
  std::erase_if(command_rules_, [&](const std::string& r) {
    const std::string_view other = std::string_view(r).substr(1);
    return !other.starts_with('@') &&
           (other == name ||
            (other.starts_with(name) && other.size() > name.size() && other[name.size()] == '|'));
  });
  command_rules_.push_back(std::move(rule));
}

std::vector<std::string> AclUser::flags() const {
  std::vector<std::string> out{enabled_ ? "on" : "off"};
  if (nopass_) out.emplace_back("nopass");
  return out;
}

std::string AclUser::command_rules() const {
  return fmt::format("{}", fmt::join(command_rules_, " "));
}

std::string AclUser::key_rules() const {
  if (all_keys_) return "~*";
  std::vector<std::string> parts;
  for (const KeyPattern& p : keys_) {
    const std::string_view prefix = p.allows == (kNeedRead | kNeedWrite) ? "~"
                                    : p.allows == kNeedRead              ? "%R~"
                                                                         : "%W~";
    parts.push_back(fmt::format("{}{}", prefix, p.glob));
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

std::string AclUser::channel_rules() const {
  if (all_channels_) return "&*";
  std::vector<std::string> parts;
  for (const std::string& c : channels_) parts.push_back("&" + c);
  return fmt::format("{}", fmt::join(parts, " "));
}

std::string AclUser::describe() const {
  std::vector<std::string> parts = flags();
  for (const std::string& h : password_hashes_) parts.push_back("#" + h);
  if (std::string keys = key_rules(); !keys.empty()) parts.push_back(std::move(keys));
  if (!all_channels_) parts.emplace_back("resetchannels");
  if (std::string channels = channel_rules(); !channels.empty()) parts.push_back(channels);
  parts.push_back(command_rules());
  return fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace tierkv::server
