// tierkv-trace: replays the shared cache traces through the memory tier's
// eviction policies and compares them with Belady's MIN and the README's
// anchor figures. See docs/trace-replay.md.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "cli/trace/mrc_check.h"
#include "cli/trace/trace_eval.h"
#include "cli/trace/trace_reader.h"

namespace fs = std::filesystem;
using tierkv::Result;
using tierkv::Status;
using namespace tierkv::trace;

namespace {

std::string trace_name_of(const fs::path& p) {
  std::string file = p.filename().string();
  return file.substr(0, file.find('.'));
}

// Every trace file in `dir` (documentation files excluded), README order first.
Result<std::vector<std::string>> traces_in(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec)
    return Status::io_error(
        fmt::format("cannot list traces directory '{}': {}", dir.string(), ec.message()));
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : it) {
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    if (ext == ".md" || ext == ".txt") continue;
    files.push_back(e.path());
  }
  if (files.empty()) return Status::not_found(fmt::format("no trace files in '{}'", dir.string()));
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    size_t oa = anchor_order(trace_name_of(a)), ob = anchor_order(trace_name_of(b));
    return oa != ob ? oa < ob : a.filename() < b.filename();
  });
  std::vector<std::string> out;
  for (const fs::path& p : files) out.push_back(p.string());
  return out;
}

// A --trace argument: an existing file, or a trace name looked up in `dir`.
Result<std::string> resolve_trace(const std::string& arg, const fs::path& dir) {
  if (fs::is_regular_file(arg)) return arg;
  Result<std::vector<std::string>> all = traces_in(dir);
  if (!all) return all.status();
  for (const std::string& path : *all) {
    if (trace_name_of(path) == arg) return path;
  }
  return Status::not_found(
      fmt::format("no trace file or trace named '{}' in '{}'", arg, dir.string()));
}

int fail(const std::string& message, int code) {
  std::cerr << "tierkv-trace: " << message << "\n";
  return code;
}

// --mrc: each trace's online curve against exact replays.
// A point off by more than the tolerance fails only if it is also off the
// exact curve's span over its own size error.
int run_mrc(const std::vector<TraceInput>& inputs, const MrcOptions& options) {
  double worst = 0;
  double worst_beyond = 0;
  for (const TraceInput& input : inputs) {
    Result<Trace> t = read_trace(input.path, input.format);
    if (!t) return fail(t.status().message(), 2);
    Result<MrcCheck> check = check_mrc(densify(t->ids), options);
    if (!check) return fail(check.status().message(), 3);
    std::cout << format_mrc(fs::path(input.path).filename().string(), *check);
    worst = std::max(worst, check->max_error());
    worst_beyond = std::max(worst_beyond, check->max_error_beyond_span());
  }
  std::cout << fmt::format(
      "RESULT name=mrc-accuracy max_error={:.4f} beyond_size_span={:.4f} tolerance={}\n", worst,
      worst_beyond, options.tolerance);
  if (worst_beyond > options.tolerance)
    return fail(fmt::format("a point is off the exact curve by {:.4f}, {:.4f} beyond its size span",
                            worst, worst_beyond),
                1);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replay cache traces through tierkv's eviction policies and Belady's MIN"};
  std::string traces_dir =
      (fs::path(TIERKV_SOURCE_DIR) / ".." / "shared" / "traces").lexically_normal().string();
  std::vector<std::string> trace_args;
  std::vector<double> fractions{0.01, 0.10};
  std::vector<std::string> policy_names;
  std::string json_path;
  std::string format_name_arg;
  bool markdown = false;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  bool mrc = false;
  MrcOptions mrc_options;
  app.add_option("--traces-dir", traces_dir, "Directory holding the trace files")
      ->capture_default_str();
  app.add_option("--trace", trace_args,
                 "Trace name (e.g. OLTP) or path to a trace file; repeatable")
      ->delimiter(',');
  app.add_option("--fractions", fractions, "Cache sizes as fractions of the unique objects")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--policies", policy_names, "Policies to replay (default: all)")->delimiter(',');
  app.add_option(
      "--format", format_name_arg,
      "Force the trace format: oracle, lis, int32be, int64be or lines (default: guessed)");
  app.add_option("--json", json_path, "Also write the results as JSON to this file");
  app.add_flag("--markdown", markdown, "Print the table as Markdown");
  app.add_option("--jobs", jobs, "Simulations to run in parallel")->check(CLI::Range(1u, 256u));
  app.add_flag("--mrc", mrc,
               "Check the online miss-ratio curve (mrc-sample-rate) against exact replays "
               "instead; exit 1 if a point is off by more than --mrc-tolerance, beyond what "
               "the exact curve does over the point's own size error");
  app.add_option("--mrc-base", mrc_options.base_fraction,
                 "The configured memory, as a fraction of the unique objects")
      ->check(CLI::Range(0.0001, 1.0))
      ->capture_default_str();
  app.add_option("--mrc-sample-rate", mrc_options.sample_rate, "Sampling rate to start at")
      ->check(CLI::Range(0.000001, 1.0))
      ->capture_default_str();
  app.add_option("--mrc-max-bytes", mrc_options.max_bytes, "DRAM bound of the curve's models")
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--mrc-tolerance", mrc_options.tolerance, "Largest error allowed at any point")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(e.what(), 2);
  }

  EvalConfig config;
  config.jobs = jobs;
  config.fractions = fractions;
  for (double f : fractions) {
    if (!(f > 0)) return fail(fmt::format("--fractions: {} is not above 0", f), 2);
  }
  if (!policy_names.empty()) {
    config.policies.clear();
    for (const std::string& name : policy_names) {
      std::optional<tierkv::memory::PolicyKind> p = tierkv::memory::parse_policy(name);
      if (!p)
        return fail(
            fmt::format("--policies: unknown policy '{}' (s3fifo, lru, clock, sieve)", name), 2);
      config.policies.push_back(*p);
    }
  }
  std::optional<TraceFormat> format;
  if (!format_name_arg.empty()) {
    format = parse_format(format_name_arg);
    if (!format) return fail(fmt::format("--format: unknown format '{}'", format_name_arg), 2);
  }

  std::vector<TraceInput> inputs;
  if (trace_args.empty()) {
    Result<std::vector<std::string>> all = traces_in(traces_dir);
    if (!all) return fail(all.status().message(), 2);
    for (const std::string& p : *all) inputs.push_back({p, format});
  } else {
    for (const std::string& arg : trace_args) {
      Result<std::string> p = resolve_trace(arg, traces_dir);
      if (!p) return fail(p.status().message(), 2);
      inputs.push_back({*p, format});
    }
  }

  if (mrc) {
    if (!config.policies.empty()) mrc_options.policy = config.policies.front();
    return run_mrc(inputs, mrc_options);
  }
  auto start = std::chrono::steady_clock::now();
  Result<std::vector<TraceResult>> results = evaluate(inputs, config);
  if (!results) {
    bool bad_input = results.status().code() != tierkv::StatusCode::kInternal;
    return fail(results.status().message(), bad_input ? 2 : 3);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << format_table(*results, markdown);
  std::cerr << fmt::format("tierkv-trace: {} traces replayed in {:.1f} s with {} jobs\n",
                           results->size(), seconds, jobs);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << format_json(*results);
    if (!out) return fail(fmt::format("cannot write '{}'", json_path), 2);
  }
  if (!anchors_hold(*results))
    return fail("a miss ratio is off its README anchor by more than 0.001", 1);
  return 0;
}
