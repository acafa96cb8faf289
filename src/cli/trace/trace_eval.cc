#include "cli/trace/trace_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <thread>

#include "cli/trace/belady.h"
#include "cli/trace/dense_trace.h"
#include "cli/trace/tier_replay.h"

namespace tierkv::trace {
namespace {

// Runs fn(0..n-1) on up to `jobs` threads.
void run_parallel(size_t n, unsigned jobs, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> threads;
  for (unsigned j = 1; j < std::min<size_t>(std::max(jobs, 1u), n); ++j)
    threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
}

// One simulation: a policy through the tier, or MIN / OPT.
struct Task {
  size_t trace;
  size_t size;
  enum Kind { kPolicy, kMin, kOpt } kind;
  size_t policy_slot = 0;
};

bool within(double ours, double anchor) {
  // The anchors have four decimals; the epsilon absorbs binary rounding.
  return std::abs(ours - anchor) <= kAnchorTolerance + 1e-9;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string size_label(const SizeResult& s) {
  return fmt::format("{:g}%={}", s.fraction * 100, s.capacity);
}

std::string check_mark(const std::optional<bool>& ok) {
  if (!ok) return "";
  return *ok ? "ok" : "MISS";
}

}  // namespace

uint64_t capacity_for(double fraction, uint64_t unique) {
  return std::max<uint64_t>(
      1, static_cast<uint64_t>(std::llround(fraction * static_cast<double>(unique))));
}

Result<std::vector<TraceResult>> evaluate(const std::vector<TraceInput>& inputs,
                                          const EvalConfig& config) {
  std::vector<DenseTrace> dense(inputs.size());
  std::vector<TraceResult> results(inputs.size());
  std::vector<Status> load_errors(inputs.size());
  run_parallel(inputs.size(), config.jobs, [&](size_t i) {
    Result<Trace> t = read_trace(inputs[i].path, inputs[i].format);
    if (!t) {
      load_errors[i] = t.status();
      return;
    }
    dense[i] = densify(t->ids);
    results[i].name = t->name;
    results[i].path = inputs[i].path;
    results[i].requests = dense[i].requests();
    results[i].unique = dense[i].unique();
  });
  for (const Status& st : load_errors) TIERKV_RETURN_IF_ERROR(st);

  std::vector<Task> tasks;
  for (size_t t = 0; t < inputs.size(); ++t) {
    for (double f : config.fractions) {
      SizeResult s;
      s.fraction = f;
      s.capacity = capacity_for(f, results[t].unique);
      s.anchor = find_anchor(results[t].name, f);
      for (memory::PolicyKind p : config.policies) s.policies.push_back({p});
      size_t size = results[t].sizes.size();
      results[t].sizes.push_back(std::move(s));
      tasks.push_back({t, size, Task::kMin});
      tasks.push_back({t, size, Task::kOpt});
      for (size_t p = 0; p < config.policies.size(); ++p)
        tasks.push_back({t, size, Task::kPolicy, p});
    }
  }
  // Longest traces first, so the last task to finish is a short one.
  std::stable_sort(tasks.begin(), tasks.end(), [&](const Task& a, const Task& b) {
    return results[a.trace].requests > results[b.trace].requests;
  });

  std::vector<Status> errors(tasks.size());
  run_parallel(tasks.size(), config.jobs, [&](size_t i) {
    const Task& task = tasks[i];
    const DenseTrace& trace = dense[task.trace];
    SizeResult& s = results[task.trace].sizes[task.size];
    double requests = static_cast<double>(trace.requests());
    switch (task.kind) {
      case Task::kMin:
        s.min_ratio = belady_min_misses(trace, s.capacity) / requests;
        break;
      case Task::kOpt:
        s.opt_ratio = belady_opt_misses(trace, s.capacity) / requests;
        break;
      case Task::kPolicy: {
        PolicyFigure& fig = s.policies[task.policy_slot];
        Result<ReplayResult> r = replay_through_tier(trace, fig.policy, s.capacity);
        if (!r) {
          errors[i] = Status(r.status().code(),
                             fmt::format("{}: {}", results[task.trace].name, r.status().message()));
          return;
        }
        fig.misses = r->misses;
        fig.miss_ratio = r->miss_ratio();
        break;
      }
    }
  });
  for (const Status& st : errors) TIERKV_RETURN_IF_ERROR(st);

  for (TraceResult& t : results) {
    for (SizeResult& s : t.sizes) {
      if (!s.anchor) continue;
      s.min_ok = within(s.min_ratio, s.anchor->min);
      for (const PolicyFigure& fig : s.policies) {
        if (fig.policy == memory::PolicyKind::kLru)
          s.lru_ok = within(fig.miss_ratio, s.anchor->lru);
      }
    }
  }
  return results;
}

bool anchors_hold(const std::vector<TraceResult>& results) {
  for (const TraceResult& t : results) {
    for (const SizeResult& s : t.sizes) {
      if (s.lru_ok == false || s.min_ok == false) return false;
    }
  }
  return true;
}

std::string format_table(const std::vector<TraceResult>& results, bool markdown) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"trace", "requests", "unique", "size"};
  if (!results.empty() && !results[0].sizes.empty()) {
    for (const PolicyFigure& fig : results[0].sizes[0].policies)
      header.push_back(fmt::format("{} (-MIN)", memory::policy_name(fig.policy)));
  }
  for (const char* h : {"MIN", "OPT", "README LRU", "LRU ok", "README MIN", "MIN ok"})
    header.push_back(h);
  rows.push_back(header);
  for (const TraceResult& t : results) {
    for (const SizeResult& s : t.sizes) {
      std::vector<std::string> row = {t.name, fmt::format("{}", t.requests),
                                      fmt::format("{}", t.unique), size_label(s)};
      for (const PolicyFigure& fig : s.policies)
        row.push_back(
            fmt::format("{:.4f} ({:+.4f})", fig.miss_ratio, fig.miss_ratio - s.min_ratio));
      row.push_back(fmt::format("{:.4f}", s.min_ratio));
      row.push_back(fmt::format("{:.4f}", s.opt_ratio));
      row.push_back(s.anchor ? fmt::format("{:.4f}", s.anchor->lru) : "-");
      row.push_back(check_mark(s.lru_ok));
      row.push_back(s.anchor ? fmt::format("{:.4f}", s.anchor->min) : "-");
      row.push_back(check_mark(s.min_ok));
      rows.push_back(std::move(row));
    }
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line = markdown ? "|" : "";
    for (size_t c = 0; c < rows[r].size(); ++c) {
      // Text columns left-aligned, figures right-aligned.
      bool left = c == 0 || c == 3;
      std::string cell = left ? fmt::format("{:<{}}", rows[r][c], width[c])
                              : fmt::format("{:>{}}", rows[r][c], width[c]);
      line += markdown ? fmt::format(" {} |", cell) : (c ? "  " : "") + cell;
    }
    while (!markdown && !line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
    if (markdown && r == 0) {
      out += "|";
      for (size_t c = 0; c < width.size(); ++c) {
        std::string dashes(width[c] + 1, '-');
        out += (c == 0 || c == 3) ? ":" + dashes + "|" : dashes + ":|";
      }
      out += "\n";
    }
  }
  return out;
}

std::string format_json(const std::vector<TraceResult>& results) {
  std::string out = "{\n  \"traces\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const TraceResult& t = results[i];
    out += fmt::format(
        "{}\n    {{\"name\": {}, \"path\": {}, \"requests\": {}, \"unique\": {}, \"sizes\": [",
        i ? "," : "", json_string(t.name), json_string(t.path), t.requests, t.unique);
    for (size_t j = 0; j < t.sizes.size(); ++j) {
      const SizeResult& s = t.sizes[j];
      out += fmt::format(
          "{}\n      {{\"fraction\": {}, \"capacity\": {}, \"min\": {:.6f}, \"opt\": {:.6f}, "
          "\"policies\": {{",
          j ? "," : "", s.fraction, s.capacity, s.min_ratio, s.opt_ratio);
      for (size_t k = 0; k < s.policies.size(); ++k) {
        const PolicyFigure& fig = s.policies[k];
        out += fmt::format(
            "{}\"{}\": {{\"misses\": {}, \"miss_ratio\": {:.6f}, \"gap_to_min\": {:.6f}}}",
            k ? ", " : "", memory::policy_name(fig.policy), fig.misses, fig.miss_ratio,
            fig.miss_ratio - s.min_ratio);
      }
      out += "}";
      if (s.anchor) {
        out += fmt::format(", \"anchor\": {{\"lru\": {}, \"min\": {}, \"opt\": {}", s.anchor->lru,
                           s.anchor->min, s.anchor->opt);
        if (s.lru_ok) out += fmt::format(", \"lru_ok\": {}", *s.lru_ok);
        if (s.min_ok) out += fmt::format(", \"min_ok\": {}", *s.min_ok);
        out += "}";
      }
      out += "}";
    }
    out += "]}";
  }
  out += fmt::format("\n  ],\n  \"anchors_hold\": {}\n}}\n", anchors_hold(results));
  return out;
}

}  // namespace tierkv::trace
