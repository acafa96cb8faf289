// Sizes and durations as people write them, --help and --version, and the
// example file made from the key table.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/version.h"

namespace tierkv {
namespace {

Result<Config> load(std::vector<std::string> args) {
  std::vector<const char*> argv{"tierkv-server"};
  for (auto& a : args) argv.push_back(a.c_str());
  return load_config(static_cast<int>(argv.size()), argv.data(), "tierkv-server");
}

TEST(ConfigText, FormatsShortestExactUnit) {
  EXPECT_EQ(format_byte_size(int64_t{1} << 30), "1gb");
  EXPECT_EQ(format_byte_size(64 << 20), "64mb");
  EXPECT_EQ(format_byte_size(64 << 10), "64kb");
  EXPECT_EQ(format_byte_size(1536 << 10), "1536kb");
  EXPECT_EQ(format_byte_size(1000), "1000");
  EXPECT_EQ(format_byte_size(0), "0");
  EXPECT_EQ(format_duration_ms(10000), "10s");
  EXPECT_EQ(format_duration_ms(90000), "90s");
  EXPECT_EQ(format_duration_ms(120000), "2m");
  EXPECT_EQ(format_duration_ms(3600000), "1h");
  EXPECT_EQ(format_duration_ms(1234), "1234ms");
  EXPECT_EQ(format_duration_ms(0), "0");
}

TEST(ConfigText, ParsesDurations) {
  EXPECT_EQ(*parse_duration_ms("250", 1), 250);
  EXPECT_EQ(*parse_duration_ms("250ms", 1), 250);
  EXPECT_EQ(*parse_duration_ms("10s", 1), 10000);
  EXPECT_EQ(*parse_duration_ms("5M", 1), 300000);
  EXPECT_EQ(*parse_duration_ms("2h", 1), 7200000);
  EXPECT_EQ(*parse_duration_ms("30", 1000), 30000);
  EXPECT_FALSE(parse_duration_ms("", 1));
  EXPECT_FALSE(parse_duration_ms("10d", 1));
  EXPECT_FALSE(parse_duration_ms("-5s", 1));
  EXPECT_FALSE(parse_duration_ms("99999999999999999h", 1));
}

TEST(ConfigText, DurationKeysTakeUnitsAndPrintPlainNumbers) {
  Config c;
  ASSERT_TRUE(config_set(c, "lease-ttl-ms", "30s").is_ok());
  EXPECT_EQ(*config_get(c, "lease-ttl-ms"), "30000");  // CONFIG GET: as Redis, a number
  EXPECT_EQ(*config_get_human(c, "lease-ttl-ms"), "30s");
  ASSERT_TRUE(config_set(c, "timeout", "5m").is_ok());
  EXPECT_EQ(c.timeout_s, 300);
  ASSERT_TRUE(config_set(c, "timeout", "300").is_ok());
  EXPECT_EQ(c.timeout_s, 300);
  EXPECT_FALSE(config_set(c, "timeout", "1500ms").is_ok()) << "not whole seconds";
  EXPECT_EQ(*config_get_human(c, "memory"), "1gb");
  EXPECT_EQ(*config_get_human(c, "bind"), "127.0.0.1");
}

TEST(ConfigText, HelpShowsSizesAndDurationsWithUnits) {
  Result<Config> c = load({"--help"});
  ASSERT_EQ(c.status().code(), StatusCode::kUnavailable);
  const std::string& help = c.status().message();
  EXPECT_NE(help.find("(default 1gb)"), std::string::npos);
  EXPECT_NE(help.find("(default 256mb)"), std::string::npos);
  EXPECT_NE(help.find("(default 10s)"), std::string::npos);  // lease-ttl-ms
  EXPECT_EQ(help.find("1073741824"), std::string::npos);
  EXPECT_NE(help.find("--version"), std::string::npos);
  EXPECT_NE(help.find("--print-example-config"), std::string::npos);
}

TEST(ConfigText, VersionFlag) {
  for (const char* flag : {"--version", "-v"}) {
    Result<Config> c = load({flag});
    ASSERT_EQ(c.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(c.status().message(), "tierkv-server " + std::string(kTierkvVersion) + " (Redis " +
                                        std::string(kRedisCompatVersion) + " compatible)");
  }
}

// The example with every line uncommented loads, and gives the defaults.
TEST(ConfigText, ExampleFileLoadsToTheDefaults) {
  Result<Config> printed = load({"--print-example-config"});
  ASSERT_EQ(printed.status().code(), StatusCode::kUnavailable);
  std::string example = printed.status().message();
  EXPECT_EQ(example, config_example_toml());
  std::istringstream in(example);
  std::string line, toml;
  size_t keys = 0;
  while (std::getline(in, line)) {
    // "# key = value" lines are settings; the others are prose.
    if (line.starts_with("# ") && line.find(" = ") != std::string::npos &&
        line.find(' ', 2) == line.find(" = ")) {
      toml += line.substr(2) + "\n";
      ++keys;
    }
  }
  EXPECT_EQ(keys, config_keys().size());
  Config loaded;
  ASSERT_TRUE(config_apply_toml_text(loaded, toml).is_ok()) << toml;
  Config defaults;
  for (const ConfigKey& k : config_keys())
    EXPECT_EQ(*config_get(loaded, k.name), *config_get(defaults, k.name)) << k.name;
  for (const ConfigKey& k : config_keys()) {
    EXPECT_NE(example.find(std::string(k.help)), std::string::npos) << k.name;
    if (k.runtime_settable()) {
      EXPECT_NE(example.find(std::string(k.help) + " (CONFIG SET)"), std::string::npos) << k.name;
    }
  }
}

}  // namespace
}  // namespace tierkv
