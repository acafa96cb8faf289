// What the server says while the store loads: Redis's INFO arithmetic, the
// "# Persistence" fields, and which commands run while loading.
#include "server/net/loading.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "server/commands/command.h"

namespace tierkv::server {
namespace {

constexpr int64_t kStartMs = 1'700'000'000'000;
constexpr uint64_t kGiB = uint64_t{1} << 30;

LoadProgress progress(uint64_t done, uint64_t total) {
  LoadProgress p;
  p.loading = true;
  p.bytes_done = done;
  p.bytes_total = total;
  p.start_ms = kStartMs;
  return p;
}

TEST(LoadingFiguresTest, PercentAndEtaAsRedisComputesThem) {
  // A quarter done after 10 s: 30 s to go, from (elapsed * remaining) / (loaded + 1).
  LoadingFigures f = loading_progress_figures(progress(kGiB, 4 * kGiB), kStartMs + 10'500);
  EXPECT_TRUE(f.loading);
  EXPECT_EQ(f.start_time_s, kStartMs / 1000);
  EXPECT_DOUBLE_EQ(f.loaded_perc, 25.0);
  EXPECT_EQ(f.eta_seconds, static_cast<int64_t>(10 * (3 * kGiB) / (kGiB + 1)));
  EXPECT_EQ(f.eta_seconds, 29);  // integer division, as Redis's
}

TEST(LoadingFiguresTest, FirstSecondGivesAnEtaOfOne) {
  LoadingFigures f = loading_progress_figures(progress(0, 4 * kGiB), kStartMs + 999);
  EXPECT_EQ(f.eta_seconds, 1);
  EXPECT_DOUBLE_EQ(f.loaded_perc, 0.0);
}

TEST(LoadingFiguresTest, UnknownTotalAndNotYetStarted) {
  LoadProgress p = progress(0, 0);
  p.start_ms = 0;  // recovery has not begun: the start is now
  LoadingFigures f = loading_progress_figures(p, kStartMs + 5000);
  EXPECT_EQ(f.start_time_s, (kStartMs + 5000) / 1000);
  EXPECT_EQ(f.eta_seconds, 1);
  EXPECT_DOUBLE_EQ(f.loaded_perc, 0.0);
  // Started 3 s ago, total still unknown: Redis's remaining of 1 byte.
  f = loading_progress_figures(progress(0, 0), kStartMs + 3000);
  EXPECT_EQ(f.eta_seconds, 3);
}

TEST(LoadingFiguresTest, MoreDoneThanTotalNeverUnderflows) {
  LoadingFigures f = loading_progress_figures(progress(5 * kGiB, 4 * kGiB), kStartMs + 20'000);
  EXPECT_EQ(f.eta_seconds, 0);
  EXPECT_DOUBLE_EQ(f.loaded_perc, 125.0);
}

std::string persistence(const LoadingFigures& f) {
  std::string out;
  render_persistence(f, out);
  return out;
}

TEST(PersistenceSectionTest, WhileLoadingHasRedisFieldsAndTheSource) {
  LoadProgress p = progress(kGiB, 4 * kGiB);
  p.from_snapshot = true;
  std::string text = persistence(loading_progress_figures(p, kStartMs + 10'000));
  EXPECT_EQ(text,
            "# Persistence\r\nloading:1\r\nasync_loading:0\r\n"
            "loading_start_time:1700000000\r\nloading_total_bytes:4294967296\r\n"
            "loading_loaded_bytes:1073741824\r\nloading_loaded_perc:25.00\r\n"
            "loading_eta_seconds:29\r\nloading_source:snapshot\r\n");
}

TEST(PersistenceSectionTest, AfterLoadingHasTheRecoveryFigures) {
  LoadingFigures f;
  f.flash = true;
  f.recovery_duration_us = 2'500'000;
  f.recovery_bytes = 2'000'000'000;
  f.recovery_objects = 1234;
  f.recovery_rate_mb_s = 800.0;
  EXPECT_EQ(persistence(f),
            "# Persistence\r\nloading:0\r\nasync_loading:0\r\nloading_source:scan\r\n"
            "recovery_duration_ms:2500\r\nrecovery_bytes:2000000000\r\n"
            "recovery_rate_mb_s:800.0\r\nrecovery_objects:1234\r\n");
  EXPECT_EQ(loading_done_line(f),
            "flash index loaded from scan: 1234 objects, 2000000000 bytes in 2.500 s (800 MB/s)");
  EXPECT_EQ(persistence(LoadingFigures{}),
            "# Persistence\r\nloading:0\r\nasync_loading:0\r\nloading_source:none\r\n");
}

TEST(LoadingGaugesTest, PublishesTheFiguresToTheRegistry) {
  MetricsRegistry metrics;
  LoadingGauges gauges(metrics);
  gauges.publish(loading_progress_figures(progress(kGiB, 4 * kGiB), kStartMs + 10'000));
  std::string text = metrics.render_prometheus();
  EXPECT_NE(text.find("\ntierkv_loading 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntierkv_loading_loaded_bytes 1073741824\n"), std::string::npos);
  EXPECT_NE(text.find("\ntierkv_loading_total_bytes 4294967296\n"), std::string::npos);
  LoadingFigures done;
  done.flash = true;
  done.recovery_duration_us = 1'250'000;
  done.recovery_bytes = 1000;
  gauges.publish(done);
  text = metrics.render_prometheus();
  EXPECT_NE(text.find("\ntierkv_loading 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntierkv_recovery_duration_seconds 1.250000\n"), std::string::npos);
  EXPECT_NE(text.find("\ntierkv_recovery_bytes 1000\n"), std::string::npos);
}

Invocation invocation(const std::vector<std::string_view>& argv) {
  Invocation inv;
  inv.argv = argv;
  return inv;
}

TEST(RunsWhileLoadingTest, ExactlyTheCommandsRedisAllowsPlusPing) {
  CommandTable table;
  register_connection_commands(table);
  register_client_commands(table);
  register_server_commands(table);
  register_slowlog_commands(table);
  register_string_commands(table);
  register_key_commands(table);
  register_tier_commands(table);
  std::set<std::string_view> allowed;
  for (const CommandSpec& spec : table.all()) {
    if (runs_while_loading(spec, invocation({spec.name, "get", "x"}))) allowed.insert(spec.name);
  }
  // Redis 7.0's "loading" commands among ours, and PING.
  std::set<std::string_view> expected = {"ping", "echo",  "hello",    "auth",    "select",
                                         "quit", "reset", "client",   "command", "config",
                                         "info", "time",  "shutdown", "slowlog"};
  EXPECT_EQ(allowed, expected);
  const CommandSpec* config = table.find("config");
  ASSERT_NE(config, nullptr);
  EXPECT_TRUE(runs_while_loading(*config, invocation({"CONFIG", "GET", "maxmemory"})));
  EXPECT_TRUE(runs_while_loading(*config, invocation({"config", "help"})));
  EXPECT_TRUE(runs_while_loading(*config, invocation({"CONFIG", "RESETSTAT"})));
  // Unlike Redis 7.0: CONFIG SET would change the store while it opens.
  EXPECT_FALSE(runs_while_loading(*config, invocation({"CONFIG", "SET", "memory", "1gb"})));
  EXPECT_FALSE(runs_while_loading(*config, invocation({"config", "set", "timeout", "0"})));
}

}  // namespace
}  // namespace tierkv::server
