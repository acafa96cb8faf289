#include "server/acl/acl_users.h"

#include <fmt/format.h>

#include "core/durable_file.h"

namespace tierkv::server {
namespace {

using UserMap = std::map<std::string, std::shared_ptr<const AclUser>, std::less<>>;

// Splits an aclfile line at spaces and tabs.
std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t end = i;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    if (end > i) out.push_back(line.substr(i, end - i));
    i = end;
  }
  return out;
}

// A user name: non-empty, no spaces (it is one word of an aclfile line).
bool valid_name(std::string_view name) {
  return !name.empty() && name.find_first_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace

AclUsers::AclUsers() {
  MutexLock lock(mu_);
  users_.emplace("default", std::make_shared<const AclUser>(AclUser::default_user()));
}

void AclUsers::set_requirepass(std::string_view password) {
  MutexLock lock(mu_);
  AclUser next = *users_.at("default");
  (void)next.apply("resetpass");
  (void)next.apply(password.empty() ? std::string("nopass") : ">" + std::string(password));
  users_["default"] = std::make_shared<const AclUser>(std::move(next));
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

Status AclUsers::set_user(std::string_view name, std::span<const std::string_view> rules,
                          size_t* failed) {
  if (!valid_name(name))
    return Status::invalid_argument("Usernames can't contain spaces or null characters");
  MutexLock lock(mu_);
  auto it = users_.find(name);
  AclUser next = it != users_.end() ? *it->second : AclUser(std::string(name));
  for (size_t i = 0; i < rules.size(); ++i) {
    *failed = i;
    TIERKV_RETURN_IF_ERROR(next.apply(rules[i]));
  }
  users_[std::string(name)] = std::make_shared<const AclUser>(std::move(next));
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return Status::ok();
}

Result<size_t> AclUsers::delete_users(std::span<const std::string_view> names) {
  for (std::string_view n : names) {
    if (n == "default") return Status::invalid_argument("The 'default' user cannot be removed");
  }
  MutexLock lock(mu_);
  size_t removed = 0;
  for (std::string_view n : names) removed += users_.erase(std::string(n));
  if (removed > 0) generation_.fetch_add(1, std::memory_order_acq_rel);
  return removed;
}

std::shared_ptr<const AclUser> AclUsers::find(std::string_view name) const {
  MutexLock lock(mu_);
  auto it = users_.find(name);
  return it == users_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const AclUser>> AclUsers::all() const {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<const AclUser>> out;
  for (const auto& [name, user] : users_) out.push_back(user);
  return out;
}

std::shared_ptr<const AclUser> AclUsers::authenticate(std::string_view name,
                                                      std::string_view password) const {
  std::shared_ptr<const AclUser> user = find(name);
  return user && user->authenticates(password) ? user : nullptr;
}

bool AclUsers::default_open() const {
  std::shared_ptr<const AclUser> user = default_user();
  return user->enabled() && user->nopass();
}

std::vector<std::string> AclUsers::describe() const {
  std::vector<std::string> lines;
  for (const auto& user : all())
    lines.push_back(fmt::format("user {} {}", user->name(), user->describe()));
  return lines;
}

Status AclUsers::save(const std::string& path) const {
  std::string text;
  for (const std::string& line : describe()) text += line + "\n";
  return write_file_durably(path, text);
}

Status AclUsers::load(const std::string& path) {
  Result<std::string> text = read_small_file(path);
  if (!text.is_ok()) return text.status();
  UserMap loaded;
  size_t line_no = 0;
  for (std::string_view rest = *text; !rest.empty();) {
    const size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);
    const std::vector<std::string_view> words = fields(line);
    if (words.empty()) continue;
    const auto fail = [&](std::string_view why) {
      return Status::invalid_argument(fmt::format("{}:{}: {}", path, line_no, why));
    };
    if (words[0] != "user") return fail("line should start with user keyword");
    if (words.size() < 2 || !valid_name(words[1])) return fail("a user name is missing");
    if (loaded.contains(words[1])) return fail(fmt::format("duplicate user '{}' found", words[1]));
    AclUser user{std::string(words[1])};
    for (size_t i = 2; i < words.size(); ++i) {
      if (Status st = user.apply(words[i]); !st.is_ok())
        return fail(fmt::format("{}. ", st.message()));
    }
    loaded.emplace(std::string(words[1]), std::make_shared<const AclUser>(std::move(user)));
  }
  if (!loaded.contains("default"))
    loaded.emplace("default", std::make_shared<const AclUser>(AclUser::default_user()));
  MutexLock lock(mu_);
  users_ = std::move(loaded);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return Status::ok();
}

}  // namespace tierkv::server
