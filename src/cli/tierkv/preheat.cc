#include "cli/tierkv/preheat.h"

#include <filesystem>
#include <thread>
#include <vector>

#include "cli/tierkv/cli_common.h"
#include "core/resp_client.h"

namespace tierkv::cli {
namespace {

// A cluster sends a key's command on at most this many times (MOVED after a
// map change, ASK to a slot's new owner, then the owner).
constexpr int kMaxRedirects = 5;

std::string source_url(const std::string& source) {
  if (source.find("://") != std::string::npos) return source;
  return "file://" + std::filesystem::absolute(source).lexically_normal().string();
}

int64_t int_field(const RespValue& job, std::string_view name) {
  const RespValue* v = job.field(name);
  return v && v->type == RespValue::Type::kInteger ? v->integer : 0;
}

std::string text_field(const RespValue& job, std::string_view name) {
  const RespValue* v = job.field(name);
  return v ? v->text : "";
}

void show_progress(ProgressLine& line, const RespValue& job, bool last) {
  const double done = static_cast<double>(int_field(job, "bytes_done"));
  const double total = static_cast<double>(int_field(job, "bytes_total"));
  const double rate = static_cast<double>(int_field(job, "rate_bytes_per_sec"));
  std::string eta = rate > 0 && total > done ? fmt::format("{:.0f}s", (total - done) / rate) : "-";
  line.show(done, total,
            fmt::format("{} / {}  {}/s  ETA {}", human_bytes(done), human_bytes(total),
                        human_bytes(rate), eta),
            last);
}

std::vector<std::string> preheat_command(const PreheatArgs& a) {
  std::vector<std::string> args = {"TIER.PREHEAT", a.key, source_url(a.source), "CACHE",
                                   a.no_cache ? "no" : "yes"};
  if (!a.digest.empty()) args.insert(args.end(), {"DIGEST", a.digest});
  if (!a.piece.empty()) args.insert(args.end(), {"PIECE", a.piece});
  if (a.ttl > 0) args.insert(args.end(), {"TTL", std::to_string(a.ttl)});
  return args;
}

// Starts the job on the key's owner: connects to `server`, and follows
// -MOVED slot host:port, and -ASK slot host:port with ASKING first (a slot
// moving, or just moved, there). `client` is left connected to the node
// running it.
Result<RespValue> start_job(const PreheatArgs& a, std::optional<RespClient>& client) {
  std::string address = a.server;
  bool asking = false;
  for (int hop = 0;; ++hop) {
    Result<RespClient> c = RespClient::connect(address);
    if (!c) return c.status();
    client.emplace(std::move(*c));
    if (asking) {
      Result<RespValue> ok = client->command({"ASKING"});
      if (!ok) return ok;
    }
    Result<RespValue> started = client->command(preheat_command(a));
    if (!started || started->type != RespValue::Type::kError || hop == kMaxRedirects)
      return started;
    asking = started->text.starts_with("ASK ");
    if (!asking && !started->text.starts_with("MOVED ")) return started;
    address = started->text.substr(started->text.rfind(' ') + 1);
  }
}

}  // namespace

int run_preheat(const PreheatArgs& a) {
  std::optional<RespClient> client;
  Result<RespValue> started = start_job(a, client);
  if (!started) return fail(started.status().message(), 2);
  if (started->type == RespValue::Type::kError) return fail(started->text, 1);
  const std::string id = std::to_string(started->integer);
  if (a.no_wait) {
    std::printf("%s\n", id.c_str());
    return 0;
  }
  ProgressLine line(a.quiet);
  for (;;) {
    if (interrupted.load()) {
      (void)client->command({"TIER.JOB", "CANCEL", id});
      line.finish();
      return fail("preheat of '" + a.key + "' cancelled (job " + id + ")", 1);
    }
    Result<RespValue> job = client->command({"TIER.JOB", id});
    if (!job) return fail(job.status().message(), 2);
    if (job->type == RespValue::Type::kError) return fail(job->text, 1);
    const std::string state = text_field(*job, "state");
    const bool ended = state != "queued" && state != "running";
    show_progress(line, *job, ended);
    if (ended) {
      line.finish();
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

}  // namespace tierkv::cli
