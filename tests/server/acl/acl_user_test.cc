// AclUser and AclUsers against what Redis 7 does with the same rules: each
// rule's effect on what a user may run and touch, the errors of bad rules,
// SETUSER's all-or-nothing, the default user and requirepass, and an
// aclfile's round trip. Every command the server registers has an ACL entry.
#include "server/acl/acl_user.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/acl/acl_users.h"
#include "server/commands/command.h"

namespace tierkv::server {
namespace {

const AclCommand& entry(std::string_view name) {
  const AclCommand* c = acl_command(name);
  EXPECT_NE(c, nullptr) << name;
  return *c;
}

AclUser user_with(std::initializer_list<std::string_view> rules) {
  AclUser u("u");
  for (std::string_view r : rules) EXPECT_TRUE(u.apply(r).is_ok()) << r;
  return u;
}

TEST(AclUserTest, DefaultUserMayDoAnythingAndNewUsersNothing) {
  const AclUser d = AclUser::default_user();
  EXPECT_EQ(d.describe(), "on nopass ~* &* +@all");
  EXPECT_TRUE(d.authenticates("anything"));
  for (const AclCommand& c : acl_commands()) EXPECT_TRUE(d.may_run(c)) << c.name;
  const AclUser fresh("u");
  EXPECT_EQ(fresh.describe(), "off resetchannels -@all");
  EXPECT_FALSE(fresh.authenticates(""));
  for (const AclCommand& c : acl_commands()) EXPECT_FALSE(fresh.may_run(c)) << c.name;
  EXPECT_FALSE(fresh.may_access("k", kNeedNone));
}

TEST(AclUserTest, PasswordsAreHashesAndOffRefusesThem) {
  AclUser u = user_with({">p1", "#" + acl_password_hash("p2")});
  EXPECT_FALSE(u.authenticates("p1")) << "off";
  ASSERT_TRUE(u.apply("on").is_ok());
  EXPECT_TRUE(u.authenticates("p1"));
  EXPECT_TRUE(u.authenticates("p2"));
  EXPECT_FALSE(u.authenticates("p3"));
  EXPECT_EQ(u.password_hashes().size(), 2u);
  EXPECT_EQ(u.password_hashes()[0], acl_password_hash("p1"));
  ASSERT_TRUE(u.apply("<p1").is_ok());
  EXPECT_FALSE(u.authenticates("p1"));
  EXPECT_EQ(u.apply("<p1").message(),
            "The password you are trying to remove from the user does not exist");
  EXPECT_EQ(u.apply("#ABC").message(),
            "The password hash must be exactly 64 characters and contain only lowercase "
            "hexadecimal characters");
  ASSERT_TRUE(u.apply("nopass").is_ok());
  EXPECT_TRUE(u.authenticates("whatever"));
  EXPECT_TRUE(u.password_hashes().empty());
  ASSERT_TRUE(u.apply("resetpass").is_ok());
  EXPECT_FALSE(u.authenticates("whatever"));
  // SHA-256 of "x", as Redis stores it.
  EXPECT_EQ(acl_password_hash("x"),
            "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881");
}

TEST(AclUserTest, CommandRulesByCategoryCommandAndSubcommand) {
  AclUser u = user_with({"+@read", "-get", "+set", "+config|get"});
  EXPECT_TRUE(u.may_run(entry("mget")));
  EXPECT_FALSE(u.may_run(entry("get")));
  EXPECT_TRUE(u.may_run(entry("set")));
  EXPECT_FALSE(u.may_run(entry("del")));
  EXPECT_TRUE(u.may_run(entry("config|get")));
  EXPECT_FALSE(u.may_run(entry("config|set")));
  EXPECT_EQ(u.command_rules(), "-@all +@read -get +set +config|get");

  AclUser admin = user_with({"+@all", "-@dangerous"});
  EXPECT_TRUE(admin.may_run(entry("get")));
  EXPECT_FALSE(admin.may_run(entry("config|set")));
  EXPECT_FALSE(admin.may_run(entry("flushall")));
  EXPECT_FALSE(admin.may_run(entry("keys")));
  EXPECT_TRUE(admin.may_run(entry("config|help")));
  EXPECT_EQ(admin.command_rules(), "+@all -@dangerous");

  // A rule on a command replaces the earlier ones on it.
  AclUser again = user_with({"+get", "+set", "-get"});
  EXPECT_EQ(again.command_rules(), "-@all +set -get");
  // +config takes its subcommands too.
  AclUser config = user_with({"+config"});
  EXPECT_TRUE(config.may_run(entry("config|set")));

  EXPECT_EQ(u.apply("+nosuch").message(), "Unknown command or category name in ACL");
  EXPECT_EQ(u.apply("+@nosuch").message(), "Unknown command or category name in ACL");
  EXPECT_EQ(u.apply("bogus").message(), "Syntax error");
  // Ours: the tier commands have their own categories.
  AclUser tier = user_with({"+@tier", "-@preheat"});
  EXPECT_TRUE(tier.may_run(entry("tier.read")));
  EXPECT_FALSE(tier.may_run(entry("tier.preheat")));
}

TEST(AclUserTest, KeyPatternsWithReadAndWritePermissions) {
  AclUser u = user_with({"~a*", "%R~r*", "%W~w*"});
  EXPECT_TRUE(u.may_access("abc", kNeedRead | kNeedWrite));
  EXPECT_TRUE(u.may_access("r1", kNeedRead));
  EXPECT_FALSE(u.may_access("r1", kNeedWrite));
  EXPECT_FALSE(u.may_access("w1", kNeedRead));
  EXPECT_TRUE(u.may_access("w1", kNeedWrite));
  EXPECT_TRUE(u.may_access("w1", kNeedNone));
  EXPECT_FALSE(u.may_access("x", kNeedNone));
  EXPECT_EQ(u.key_rules(), "~a* %R~r* %W~w*");
  // R and W on one pattern read back as ~.
  ASSERT_TRUE(u.apply("%W~r*").is_ok());
  EXPECT_TRUE(u.may_access("r1", kNeedRead | kNeedWrite));
  EXPECT_EQ(u.key_rules(), "~a* ~r* %W~w*");
  EXPECT_EQ(u.apply("%X~k").message(), "Syntax error");

  ASSERT_TRUE(u.apply("allkeys").is_ok());
  EXPECT_TRUE(u.may_access("anything", kNeedRead | kNeedWrite));
  EXPECT_EQ(u.key_rules(), "~*");
  EXPECT_FALSE(u.apply("~more").is_ok()) << "a pattern after allkeys";
  ASSERT_TRUE(u.apply("resetkeys").is_ok());
  EXPECT_FALSE(u.may_access("abc", kNeedRead));
  EXPECT_EQ(u.key_rules(), "");
}

TEST(AclUserTest, ResetTakesEverythingAway) {
  AclUser u = user_with({"on", ">p", "~*", "+@all", "&*"});
  ASSERT_TRUE(u.apply("reset").is_ok());
  EXPECT_EQ(u.describe(), "off resetchannels -@all");
  EXPECT_FALSE(u.authenticates("p"));
}

TEST(AclUsersTest, SetUserIsAllOrNothing) {
  AclUsers users;
  size_t failed = 0;
  const std::vector<std::string_view> good = {"on", ">p", "+get", "~k*"};
  ASSERT_TRUE(users.set_user("alice", good, &failed).is_ok());
  const uint64_t generation = users.generation();
  const std::vector<std::string_view> bad = {"+set", "+nosuch", "off"};
  Status st = users.set_user("alice", bad, &failed);
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(users.generation(), generation) << "nothing changed";
  auto alice = users.find("alice");
  ASSERT_NE(alice, nullptr);
  EXPECT_FALSE(alice->may_run(entry("set")));
  EXPECT_TRUE(alice->enabled());
  EXPECT_FALSE(users.set_user("bob", bad, &failed).is_ok());
  EXPECT_EQ(users.find("bob"), nullptr) << "a user whose SETUSER failed is not created";
  EXPECT_EQ(users.authenticate("alice", "p"), alice);
  EXPECT_EQ(users.authenticate("alice", "q"), nullptr);
  EXPECT_EQ(users.authenticate("nobody", "p"), nullptr);
}

TEST(AclUsersTest, DefaultUserFollowsRequirepassAndStays) {
  AclUsers users;
  EXPECT_TRUE(users.default_open());
  users.set_requirepass("s3cret");
  EXPECT_FALSE(users.default_open());
  EXPECT_NE(users.authenticate("default", "s3cret"), nullptr);
  EXPECT_EQ(users.authenticate("default", "other"), nullptr);
  users.set_requirepass("");
  EXPECT_TRUE(users.default_open());
  const std::vector<std::string_view> names = {"default"};
  EXPECT_EQ(users.delete_users(names).status().message(), "The 'default' user cannot be removed");
  EXPECT_NE(users.default_user(), nullptr);
}

TEST(AclUsersTest, AnAclFileRoundTripsAndABadOneChangesNothing) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tierkv-acl-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "users.acl").string();
  AclUsers users;
  size_t failed = 0;
  const std::vector<std::string_view> rules = {"on", ">p", "%R~r*", "+@read", "-keys"};
  ASSERT_TRUE(users.set_user("reader", rules, &failed).is_ok());
  ASSERT_TRUE(users.save(path).is_ok());

  AclUsers loaded;
  ASSERT_TRUE(loaded.load(path).is_ok());
  EXPECT_EQ(loaded.describe(), users.describe());
  auto reader = loaded.find("reader");
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->authenticates("p"));
  EXPECT_FALSE(reader->may_run(entry("keys")));

  std::ofstream(path) << "user a on nopass +get\nuser b on +nosuch\n";
  Status st = loaded.load(path);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(":2:"), std::string::npos) << st.message();
  EXPECT_NE(loaded.find("reader"), nullptr) << "a failed load keeps the users";
  EXPECT_EQ(loaded.find("a"), nullptr);
  std::filesystem::remove_all(dir);
}

TEST(AclTableTest, EveryCommandHasAnEntry) {
  CommandTable table;
  register_all_commands(table);
  for (const CommandSpec& spec : table.all())
    EXPECT_NE(acl_command(spec.name), nullptr) << spec.name << " has no ACL categories";
  // Subcommands are checked, not their container.
  const std::vector<std::string_view> argv = {"CONFIG", "SET", "k", "v"};
  EXPECT_EQ(acl_command_for("config", argv)->name, "config|set");
  const std::vector<std::string_view> unknown = {"CONFIG", "NOPE"};
  EXPECT_EQ(acl_command_for("config", unknown)->name, "config");
}

}  // namespace
}  // namespace tierkv::server
