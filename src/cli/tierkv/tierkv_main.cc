// tierkv: the operator's command-line tool.
//
//   tierkv preheat SOURCE --key K [--no-cache] [--digest sha256:HEX] [--piece SIZE]
//                         [--ttl SECONDS] [--server HOST:PORT] [--quiet] [--no-wait]
//
// preheat starts a TIER.PREHEAT job on a running server and shows its
// progress (bytes, rate, ETA) until it ends. SOURCE is an http(s):// or
// file:// URL, or a local path (made absolute; the server reads it, so it
// must be on the server's machine). Ctrl-C cancels the job. The exit code
// is 0 when the job is done, 1 when it failed or was cancelled, 2 for a
// usage or connection error; each failure prints one line.
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/resp_client.h"

namespace tierkv::cli {
namespace {

std::atomic<bool> interrupted{false};

struct PreheatArgs {
  std::string source, key, digest, piece, server = "127.0.0.1:6380";
  int64_t ttl = 0;
  bool no_cache = false, quiet = false, no_wait = false;
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.{}f} {}", b, u == 0 ? 0 : 2, units[u]);
}

std::string source_url(const std::string& source) {
  if (source.find("://") != std::string::npos) return source;
  return "file://" + std::filesystem::absolute(source).lexically_normal().string();
}

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "tierkv: %s\n", message.c_str());
  return code;
}

int64_t int_field(const RespValue& job, std::string_view name) {
  const RespValue* v = job.field(name);
  return v && v->type == RespValue::Type::kInteger ? v->integer : 0;
}

std::string text_field(const RespValue& job, std::string_view name) {
  const RespValue* v = job.field(name);
  return v ? v->text : "";
}

void show_progress(const RespValue& job, bool tty) {
  const double done = static_cast<double>(int_field(job, "bytes_done"));
  const double total = static_cast<double>(int_field(job, "bytes_total"));
  const double rate = static_cast<double>(int_field(job, "rate_bytes_per_sec"));
  const double pct = total > 0 ? 100.0 * done / total : 0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(pct / 100 * kWidth);
  std::string eta = rate > 0 && total > done ? fmt::format("{:.0f}s", (total - done) / rate) : "-";
  std::fprintf(stderr, "%s[%s%s] %5.1f%%  %s / %s  %s/s  ETA %s   %s", tty ? "\r" : "",
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), pct,
               human_bytes(done).c_str(), human_bytes(total).c_str(), human_bytes(rate).c_str(),
               eta.c_str(), tty ? "" : "\n");
  std::fflush(stderr);
}

std::vector<std::string> preheat_command(const PreheatArgs& a) {
  std::vector<std::string> args = {"TIER.PREHEAT", a.key, source_url(a.source), "CACHE",
                                   a.no_cache ? "no" : "yes"};
  if (!a.digest.empty()) args.insert(args.end(), {"DIGEST", a.digest});
  if (!a.piece.empty()) args.insert(args.end(), {"PIECE", a.piece});
  if (a.ttl > 0) args.insert(args.end(), {"TTL", std::to_string(a.ttl)});
  return args;
}

int run_preheat(const PreheatArgs& a) {
  Result<RespClient> client = RespClient::connect(a.server);
  if (!client) return fail(client.status().message(), 2);
  Result<RespValue> started = client->command(preheat_command(a));
  if (!started) return fail(started.status().message(), 2);
  if (started->type == RespValue::Type::kError) return fail(started->text, 1);
  const std::string id = std::to_string(started->integer);
  if (a.no_wait) {
    std::printf("%s\n", id.c_str());
    return 0;
  }
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  auto last_shown = std::chrono::steady_clock::now() - std::chrono::hours(1);
  for (;;) {
    if (interrupted.load()) {
      (void)client->command({"TIER.JOB", "CANCEL", id});
      if (tty && !a.quiet) std::fputc('\n', stderr);
      return fail("preheat of '" + a.key + "' cancelled (job " + id + ")", 1);
    }
    Result<RespValue> job = client->command({"TIER.JOB", id});
    if (!job) return fail(job.status().message(), 2);
    if (job->type == RespValue::Type::kError) return fail(job->text, 1);
    const std::string state = text_field(*job, "state");
    const auto now = std::chrono::steady_clock::now();
    const bool ended = state != "queued" && state != "running";
    if (!a.quiet && (ended || now - last_shown >= (tty ? std::chrono::milliseconds(200)
                                                       : std::chrono::milliseconds(2000)))) {
      show_progress(*job, tty);
      last_shown = now;
    }
    if (ended) {
      if (tty && !a.quiet) std::fputc('\n', stderr);
      if (state != "done") {
        return fail("preheat of '" + a.key + "' " + state + ": " + text_field(*job, "error"), 1);
      }
      const double ms =
          static_cast<double>(int_field(*job, "finished_ms") - int_field(*job, "started_ms"));
      std::printf("preheated '%s': %s in %.2f s%s\n", a.key.c_str(),
                  human_bytes(static_cast<double>(int_field(*job, "bytes_total"))).c_str(),
                  ms / 1000, int_field(*job, "cached") ? ", in memory and on flash" : ", on flash");
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace
}  // namespace tierkv::cli

int main(int argc, char** argv) {
  using tierkv::cli::PreheatArgs;
  CLI::App app{"tierkv: the operator's tool for a tierkv server"};
  app.require_subcommand(1);
  PreheatArgs a;
  CLI::App* preheat = app.add_subcommand(
      "preheat", "Load a file or URL into the server's flash and memory, with progress");
  preheat->add_option("source", a.source, "http(s):// or file:// URL, or a local path")->required();
  preheat->add_option("--key", a.key, "Key to store it under")->required();
  preheat->add_flag("--no-cache", a.no_cache, "Write to flash only (default: memory too)");
  preheat->add_option("--digest", a.digest, "Expected content digest: sha256:<hex>");
  preheat->add_option("--piece", a.piece, "Piece size (e.g. 8mb; default: size / 500, 4-64 MiB)");
  preheat->add_option("--ttl", a.ttl, "Expire the key after this many seconds")
      ->check(CLI::PositiveNumber);
  preheat->add_option("--server", a.server, "Server address")->capture_default_str();
  preheat->add_flag("--quiet", a.quiet, "No progress bar");
  preheat->add_flag("--no-wait", a.no_wait, "Print the job id and return at once");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "tierkv: %s\n", e.what());
    return 2;
  }
  std::signal(SIGINT, [](int) { tierkv::cli::interrupted.store(true); });
  return tierkv::cli::run_preheat(a);
}
