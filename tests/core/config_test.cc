#include "core/config.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace tierkv {
namespace {

// A one-line error that names the offending key in quotes.
void expect_names_key(const Status& s, const std::string& key) {
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'" + key + "'"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

TEST(ConfigTest, DefaultsMatchTheDesign) {
  Config c;
  EXPECT_EQ(c.bind, "127.0.0.1");
  EXPECT_EQ(c.port, 6380);
  EXPECT_EQ(c.memory, int64_t{1} << 30);
  EXPECT_EQ(c.chunk_size, 1 << 20);
  EXPECT_EQ(c.max_key_size, 64 << 10);
  EXPECT_EQ(c.max_object_size, int64_t{1} << 30);
  EXPECT_EQ(c.eviction_policy, EvictionPolicyKind::kS3Fifo);
  EXPECT_EQ(c.metrics_port, 9380);
  EXPECT_EQ(c.flash_size, int64_t{8} << 30);
  // A directory (trailing '/'): the flash file goes inside ./tierkv-data.
  EXPECT_EQ(c.flash_path, "./tierkv-data/");
  EXPECT_EQ(c.offload_policy, OffloadPolicy::kOnEvict);
  EXPECT_TRUE(c.protected_mode);
  EXPECT_EQ(c.metrics_timeout_ms, 5000);
  EXPECT_EQ(c.metrics_max_clients, 16);
  EXPECT_EQ(c.promotion_threshold, 2);
  EXPECT_DOUBLE_EQ(c.lease_max_fraction, 0.25);
  EXPECT_DOUBLE_EQ(c.dirty_max_fraction, 0.5);
  EXPECT_TRUE(config_validate(c).is_ok());
  EXPECT_EQ(*config_get(c, "memory"), "1073741824");
  EXPECT_EQ(*config_get(c, "eviction-policy"), "s3fifo");
}

TEST(ConfigTest, EveryKeyRoundTripsThroughGet) {
  Config c;
  for (const ConfigKey& k : config_keys()) {
    Result<std::string> v = config_get(c, k.name);
    ASSERT_TRUE(v) << k.name;
    EXPECT_TRUE(config_set(c, k.name, *v).is_ok()) << k.name << "=" << *v;
  }
  EXPECT_EQ(config_get(c, "no-such-key").status().code(), StatusCode::kNotFound);
}

TEST(ConfigTest, SetParsesEachKind) {
  Config c;
  ASSERT_TRUE(config_set(c, "memory", "256mb").is_ok());
  EXPECT_EQ(c.memory, 256 << 20);
  ASSERT_TRUE(config_set(c, "PORT", "7000").is_ok());  // names are case-insensitive
  EXPECT_EQ(c.port, 7000);
  ASSERT_TRUE(config_set(c, "eviction_policy", "LRU").is_ok());  // '_' means '-'
  EXPECT_EQ(c.eviction_policy, EvictionPolicyKind::kLru);
  ASSERT_TRUE(config_set(c, "lease-max-fraction", "0.5").is_ok());
  EXPECT_DOUBLE_EQ(c.lease_max_fraction, 0.5);
  ASSERT_TRUE(config_set(c, "dirty_max_fraction", "1").is_ok());
  EXPECT_DOUBLE_EQ(c.dirty_max_fraction, 1.0);
  EXPECT_FALSE(config_set(c, "dirty-max-fraction", "1.01").is_ok());
  ASSERT_TRUE(config_set(c, "flash-reinsertion-share", "0.25").is_ok());
  EXPECT_DOUBLE_EQ(c.flash_reinsertion_share, 0.25);
  EXPECT_FALSE(config_set(c, "flash-reinsertion-share", "0.6").is_ok());
  EXPECT_FALSE(config_set(c, "flash-reinsertion-share", "0").is_ok());
  ASSERT_TRUE(config_set(c, "bind", "0.0.0.0").is_ok());
  EXPECT_EQ(c.bind, "0.0.0.0");
}

TEST(ConfigTest, TieringKeysAndEnumValuesWithUnderscores) {
  Config c;
  // Only key names treat '_' as '-'; enum values keep theirs.
  ASSERT_TRUE(config_set(c, "offload-policy", "write_through").is_ok());
  EXPECT_EQ(c.offload_policy, OffloadPolicy::kWriteThrough);
  ASSERT_TRUE(config_set(c, "flash_fsync", "Always").is_ok());
  EXPECT_EQ(c.flash_fsync, FlashFsync::kAlways);
  EXPECT_FALSE(config_set(c, "offload-policy", "write-through").is_ok());
  ASSERT_TRUE(config_set(c, "flash-size", "0").is_ok());  // memory only
  EXPECT_TRUE(config_validate(c).is_ok());
  c.flash_size = c.region_size;  // one region cannot hold a log
  EXPECT_FALSE(config_validate(c).is_ok());
  c.flash_size = int64_t{1} << 30;
  c.region_size = c.chunk_size;  // a region must hold a whole chunk record
  EXPECT_FALSE(config_validate(c).is_ok());
}

TEST(ConfigTest, ClusterModeRefusesAnAnnounceAddressNoOneReaches) {
  Config c;
  c.cluster_enabled = true;
  EXPECT_TRUE(config_validate(c).is_ok());  // bind 127.0.0.1: reachable on loopback
  for (const char* wildcard : {"0.0.0.0", "::", "*"}) {
    c.bind = wildcard;
    Status st = config_validate(c);
    EXPECT_FALSE(st.is_ok()) << wildcard;
    EXPECT_NE(st.message().find("cluster-announce-host"), std::string::npos) << st.message();
    c.cluster_announce_host = "10.0.0.7";
    EXPECT_TRUE(config_validate(c).is_ok()) << wildcard;
    c.cluster_announce_host = wildcard;
    EXPECT_FALSE(config_validate(c).is_ok()) << wildcard;
    c.cluster_announce_host.clear();
  }
  c.cluster_enabled = false;
  EXPECT_TRUE(config_validate(c).is_ok());  // only cluster mode announces
}

TEST(ConfigTest, RepeatedFlagTakesTheLastValue) {
  const char* argv[] = {"prog", "--memory", "64mb", "--memory", "128mb"};
  Result<Config> c = load_config(5, argv, "prog");
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->memory, 128 << 20);
}

TEST(ConfigTest, BadValuesGiveOneLineErrorNamingTheKey) {
  Config c;
  expect_names_key(config_set(c, "memory", "lots"), "memory");
  expect_names_key(config_set(c, "memory", "1k"), "memory");  // below the minimum
  expect_names_key(config_set(c, "port", "70000"), "port");
  expect_names_key(config_set(c, "port", "12ab"), "port");
  expect_names_key(config_set(c, "eviction-policy", "random"), "eviction-policy");
  expect_names_key(config_set(c, "lease-max-fraction", "1.5"), "lease-max-fraction");
  expect_names_key(config_set(c, "lease-max-fraction", "half"), "lease-max-fraction");
  expect_names_key(config_set(c, "no-such-key", "1"), "no-such-key");
  EXPECT_EQ(c.memory, int64_t{1} << 30) << "a rejected value must not be applied";
  EXPECT_EQ(c.port, 6380);
}

// Every choice of every enumeration parses into its typed value and prints
// back as the same text; anything else is refused, naming the key.
template <typename E>
void expect_enum_round_trip(const std::string& key, E Config::*field,
                            const std::vector<std::pair<std::string, E>>& values) {
  for (const auto& [text, value] : values) {
    Config c;
    ASSERT_TRUE(config_set(c, key, text).is_ok()) << key << "=" << text;
    EXPECT_EQ(c.*field, value) << key << "=" << text;
    EXPECT_EQ(*config_get(c, key), text);
    std::string upper = text;
    for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    ASSERT_TRUE(config_set(c, key, upper).is_ok()) << key << "=" << upper;
    EXPECT_EQ(*config_get(c, key), text) << "CONFIG GET prints the canonical spelling";
  }
  Config c;
  Config before = c;
  for (const char* bad : {"", "bogus", "yes no", " none"}) {
    Status s = config_set(c, key, bad);
    expect_names_key(s, key);
    EXPECT_NE(s.message().find("expected one of"), std::string::npos) << s.message();
  }
  EXPECT_EQ(c.*field, before.*field) << "a refused value changes nothing";
}

TEST(ConfigTest, EveryEnumValueRoundTrips) {
  using EP = EvictionPolicyKind;
  expect_enum_round_trip<EP>(
      "eviction-policy", &Config::eviction_policy,
      {{"s3fifo", EP::kS3Fifo}, {"lru", EP::kLru}, {"clock", EP::kClock}, {"sieve", EP::kSieve}});
  expect_enum_round_trip<FlashFsync>("flash-fsync", &Config::flash_fsync,
                                     {{"none", FlashFsync::kNone},
                                      {"everysec", FlashFsync::kEverySec},
                                      {"always", FlashFsync::kAlways}});
  expect_enum_round_trip<OffloadPolicy>(
      "offload-policy", &Config::offload_policy,
      {{"on_evict", OffloadPolicy::kOnEvict}, {"write_through", OffloadPolicy::kWriteThrough}});
  expect_enum_round_trip<LogLevel>("log-level", &Config::log_level,
                                   {{"trace", LogLevel::kTrace},
                                    {"debug", LogLevel::kDebug},
                                    {"info", LogLevel::kInfo},
                                    {"warn", LogLevel::kWarn},
                                    {"error", LogLevel::kError}});
  const std::pair<const char*, bool Config::*> booleans[] = {
      {"flash-reinsertion", &Config::flash_reinsertion},
      {"flash-preallocate", &Config::flash_preallocate},
      {"flash-direct-io", &Config::flash_direct_io},
      {"protected-mode", &Config::protected_mode}};
  for (const auto& [key, field] : booleans) {
    SCOPED_TRACE(key);
    expect_enum_round_trip<bool>(key, field, {{"yes", true}, {"no", false}});
  }
}

TEST(ConfigTest, TomlBooleansAndEnumsAreTyped) {
  Config c;
  Status s = config_apply_toml_text(c, R"(
flash-reinsertion = false
flash-preallocate = false
protected-mode = false
flash-fsync = "everysec"
offload-policy = "write_through"
log-level = "warn"
)");
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_FALSE(c.flash_reinsertion);
  EXPECT_FALSE(c.flash_preallocate);
  EXPECT_FALSE(c.protected_mode);
  EXPECT_EQ(c.flash_fsync, FlashFsync::kEverySec);
  EXPECT_EQ(c.offload_policy, OffloadPolicy::kWriteThrough);
  EXPECT_EQ(c.log_level, LogLevel::kWarn);
  expect_names_key(config_apply_toml_text(c, "flash-fsync = \"sometimes\"\n"), "flash-fsync");
  expect_names_key(config_apply_toml_text(c, "protected-mode = 1\n"), "protected-mode");
}

TEST(ConfigTest, EnumOutsideItsChoicesFailsValidation) {
  Config c;
  c.flash_fsync = static_cast<FlashFsync>(7);  // an embedded caller's cast
  EXPECT_EQ(config_validate(c).code(), StatusCode::kInvalidArgument);
}

TEST(ConfigTest, RuntimeSettableKeysAreExactlyThoseWithAnApplyHook) {
  std::vector<std::string> settable;
  for (const ConfigKey& k : config_keys()) {
    if (k.runtime_settable()) settable.emplace_back(k.name);
  }
  const std::vector<std::string> expected = {"maxclients",
                                             "timeout",
                                             "requirepass",
                                             "acllog-max-len",
                                             "protected-mode",
                                             "proto-max-bulk-len",
                                             "max-multibulk-args",
                                             "max-inline-len",
                                             "client-output-buffer-limit",
                                             "client-query-buffer-limit",
                                             "maxmemory-clients",
                                             "metrics-timeout-ms",
                                             "metrics-max-clients",
                                             "slowlog-log-slower-than",
                                             "slowlog-max-len",
                                             "log-level",
                                             "max-key-size",
                                             "max-object-size",
                                             "memory",
                                             "lease-max-fraction",
                                             "lease-ttl-ms",
                                             "active-expire-hz",
                                             "offload-wait-ms",
                                             "dirty-max-fraction",
                                             "promotion-threshold",
                                             "promotion-max-inflight",
                                             "promotion-max-inflight-bytes",
                                             "promotion-on-hit",
                                             "exists-prefetch",
                                             "exists-prefetch-map",
                                             "demand-kick",
                                             "demand-kick-max-failures",
                                             "prefetch-dedup-ttl-ms",
                                             "prefetch-dedup-max-entries",
                                             "prefetch-cooldown-ms",
                                             "prefetch-cooldown-max-ms",
                                             "prefetch-min-window-share",
                                             "masteruser",
                                             "masterauth",
                                             "tls-cert-file",
                                             "tls-key-file",
                                             "tls-key-file-pass",
                                             "tls-ca-cert-file",
                                             "tls-ca-cert-dir",
                                             "tls-auth-clients",
                                             "tls-protocols",
                                             "tls-ciphers",
                                             "tls-ciphersuites",
                                             "tls-prefer-server-ciphers",
                                             "preheat-sources",
                                             "preheat-max-jobs",
                                             "preheat-pieces-inflight",
                                             "preheat-retries",
                                             "preheat-buffer",
                                             "preheat-max-files",
                                             "preheat-max-queued",
                                             "flash-read-window",
                                             "flash-read-inflight",
                                             "flash-read-buffer",
                                             "flash-write-buffer",
                                             "stream-depth",
                                             "stream-channels",
                                             "stream-useonce-max-fraction",
                                             "readahead",
                                             "readahead-max-chunks"};
  EXPECT_EQ(settable, expected);
  ASSERT_NE(find_config_key("Lease_TTL_ms"), nullptr);
  EXPECT_EQ(find_config_key("Lease_TTL_ms")->apply, ConfigApply::kLeaseTtl);
  EXPECT_EQ(find_config_key("eviction-policy")->apply, ConfigApply::kNone);
  EXPECT_EQ(find_config_key("no-such-key"), nullptr);
}

TEST(ConfigTest, UnboundedMaximumIsNotPrintedAsGarbage) {
  Config c;
  Status s = config_set(c, "memory", "1k");
  EXPECT_NE(s.message().find("at least 1048576"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("-9223372036854775808"), std::string::npos) << s.message();
}

TEST(ConfigTest, ValidateCrossKeyRules) {
  Config c;
  c.chunk_size = 3 << 20;
  expect_names_key(config_validate(c), "chunk-size");
  c = Config{};
  c.memory_shards = 12;
  expect_names_key(config_validate(c), "memory-shards");
  c = Config{};
  c.memory = 2 << 20;  // fewer than 4 chunks of 1 MiB
  expect_names_key(config_validate(c), "memory");
  c = Config{};
  c.max_object_size = c.proto_max_bulk_len + 1;
  expect_names_key(config_validate(c), "max-object-size");
}

TEST(ConfigTest, TomlOverridesDefaults) {
  Config c;
  Status s = config_apply_toml_text(c, R"(
memory = "256mb"
chunk_size = 65536
eviction-policy = "sieve"
lease-max-fraction = 0.5
port = 7001
)");
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(c.memory, 256 << 20);
  EXPECT_EQ(c.chunk_size, 65536);
  EXPECT_EQ(c.eviction_policy, EvictionPolicyKind::kSieve);
  EXPECT_DOUBLE_EQ(c.lease_max_fraction, 0.5);
  EXPECT_EQ(c.port, 7001);
  EXPECT_EQ(c.bind, "127.0.0.1");  // untouched keys keep their defaults
}

TEST(ConfigTest, TomlErrorsNameTheKey) {
  Config c;
  expect_names_key(config_apply_toml_text(c, "memory = \"lots\"\n"), "memory");
  expect_names_key(config_apply_toml_text(c, "colour = 3\n"), "colour");
  expect_names_key(config_apply_toml_text(c, "[memory]\nx = 1\n"), "memory");
  Status syntax = config_apply_toml_text(c, "memory = = 3\n");
  EXPECT_EQ(syntax.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(syntax.message().find("line 1"), std::string::npos) << syntax.message();
}

class LoadConfigTest : public ::testing::Test {
 protected:
  std::string write_toml(const std::string& text) {
    std::string path = ::testing::TempDir() + "/tierkv_config_test.toml";
    std::ofstream(path) << text;
    return path;
  }
  static Result<Config> load(std::vector<std::string> args) {
    std::vector<const char*> argv{"tierkv-server"};
    for (auto& a : args) argv.push_back(a.c_str());
    return load_config(static_cast<int>(argv.size()), argv.data(), "tierkv-server");
  }
};

TEST_F(LoadConfigTest, NoArgumentsGiveDefaults) {
  Result<Config> c = load({});
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->memory, Config{}.memory);
  EXPECT_EQ(c->port, 6380);
}

TEST_F(LoadConfigTest, FlagsOverrideTomlWhichOverridesDefaults) {
  std::string path = write_toml("memory = \"256mb\"\nport = 7002\n");
  Result<Config> c = load({"--config", path, "--memory", "512mb", "--eviction-policy", "clock"});
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->memory, 512 << 20);  // flag wins over the file
  EXPECT_EQ(c->port, 7002);         // file wins over the default
  EXPECT_EQ(c->eviction_policy, EvictionPolicyKind::kClock);
  std::remove(path.c_str());
}

TEST_F(LoadConfigTest, BadFlagValueNamesTheKey) {
  Result<Config> c = load({"--memory", "plenty"});
  expect_names_key(c.status(), "memory");
  c = load({"--chunk-size", "3mb"});
  expect_names_key(c.status(), "chunk-size");
}

TEST_F(LoadConfigTest, BadFileValueNamesTheKey) {
  std::string path = write_toml("port = \"x\"\n");
  Result<Config> c = load({"-c", path});
  expect_names_key(c.status(), "port");
  std::remove(path.c_str());
}

TEST_F(LoadConfigTest, HelpReturnsUnavailableWithText) {
  Result<Config> c = load({"--help"});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("--memory"), std::string::npos);
}

TEST(ParseByteSizeTest, UnitsAndErrors) {
  EXPECT_EQ(*parse_byte_size("4096"), 4096);
  EXPECT_EQ(*parse_byte_size("0"), 0);
  EXPECT_EQ(*parse_byte_size("12b"), 12);
  EXPECT_EQ(*parse_byte_size("4k"), 4096);
  EXPECT_EQ(*parse_byte_size("64kb"), 64 << 10);
  EXPECT_EQ(*parse_byte_size("64KiB"), 64 << 10);
  EXPECT_EQ(*parse_byte_size("256MiB"), 256 << 20);
  EXPECT_EQ(*parse_byte_size("1gb"), int64_t{1} << 30);
  EXPECT_EQ(*parse_byte_size("1GB"), int64_t{1} << 30);
  EXPECT_EQ(*parse_byte_size("2t"), int64_t{2} << 40);
  for (const char* bad :
       {"", "gb", "-1", "1.5gb", "12xb", "1 gb", "99999999999999999999", "9000000000t"}) {
    EXPECT_FALSE(parse_byte_size(bad)) << bad;
  }
}

}  // namespace
}  // namespace tierkv
