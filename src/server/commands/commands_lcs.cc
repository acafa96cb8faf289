// LCS: the longest common subsequence of two string values, with Redis
// 7.0's options (LEN, IDX, MINMATCHLEN, WITHMATCHLEN), dynamic-programming
// table, limits and error texts. Missing keys are empty strings. Values are
// read from memory (kReadsValue fetches flash-only ones first).
#include <cstdint>
#include <string>
#include <vector>

#include "server/commands/string_common.h"

namespace tierkv::server {
namespace {

struct LcsOptions {
  bool len = false, idx = false, withmatchlen = false;
  int64_t minmatchlen = 0;
};

// Parses the options from argument 3 on; false after replying an error.
bool parse_lcs_options(CommandContext& ctx, LcsOptions* o) {
  for (size_t j = 3; j < ctx.argc(); ++j) {
    std::string_view opt = ctx.arg(j);
    bool more = j + 1 < ctx.argc();
    if (iequals(opt, "idx")) {
      o->idx = true;
    } else if (iequals(opt, "len")) {
      o->len = true;
    } else if (iequals(opt, "withmatchlen")) {
      o->withmatchlen = true;
    } else if (iequals(opt, "minmatchlen") && more) {
      std::optional<int64_t> v = parse_int64(ctx.arg(++j));
      if (!v) {
        ctx.reply.error(errors::kNotInteger);
        return false;
      }
      o->minmatchlen = *v < 0 ? 0 : *v;
    } else {
      ctx.reply.error(errors::kSyntax);
      return false;
    }
  }
  if (o->idx && o->len) {
    ctx.reply.error("ERR If you want both the length and indexes, please just use IDX.");
    return false;
  }
  return true;
}

// One matching range, from the end of the strings backwards as Redis emits.
struct LcsMatch {
  uint32_t a_start, a_end, b_start, b_end;
};

class LcsTable {
 public:
  LcsTable(const std::string& a, const std::string& b) : a_(a), b_(b), w_(b.size() + 1) {
    t_.assign((a.size() + 1) * w_, 0);
    for (size_t i = 1; i <= a.size(); ++i)
      for (size_t j = 1; j <= b.size(); ++j)
        at(i, j) =
            a[i - 1] == b[j - 1] ? at(i - 1, j - 1) + 1 : std::max(at(i - 1, j), at(i, j - 1));
  }
  uint32_t length() const { return t_.back(); }

  // Walks back from the end: the LCS string and the ranges Redis reports.
  void walk(int64_t minmatchlen, std::string* result, std::vector<LcsMatch>* matches) const {
    uint32_t alen = static_cast<uint32_t>(a_.size());
    uint32_t i = alen, j = static_cast<uint32_t>(b_.size()), idx = length();
    result->assign(idx, '\0');
    LcsMatch cur{alen, 0, 0, 0};  // a_start == alen: no range open
    while (i > 0 && j > 0) {
      bool emit = false;
      if (a_[i - 1] == b_[j - 1]) {
        (*result)[--idx] = a_[i - 1];
        if (cur.a_start == alen) {
          cur = {i - 1, i - 1, j - 1, j - 1};
        } else if (cur.a_start == i && cur.b_start == j) {
          --cur.a_start;
          --cur.b_start;
        } else {
          emit = true;
        }
        if (cur.a_start == 0 || cur.b_start == 0) emit = true;
        --i;
        --j;
      } else {
        if (at(i - 1, j) > at(i, j - 1))
          --i;
        else
          --j;
        if (cur.a_start != alen) emit = true;
      }
      if (!emit) continue;
      uint32_t match_len = cur.a_end - cur.a_start + 1;
      if (minmatchlen == 0 || match_len >= minmatchlen) matches->push_back(cur);
      cur.a_start = alen;
    }
  }

 private:
  uint32_t& at(size_t i, size_t j) { return t_[i * w_ + j]; }
  uint32_t at(size_t i, size_t j) const { return t_[i * w_ + j]; }

  const std::string& a_;
  const std::string& b_;
  size_t w_;
  std::vector<uint32_t> t_;
};

void reply_idx(CommandContext& ctx, const std::vector<LcsMatch>& matches, uint32_t len,
               bool withmatchlen) {
  ctx.reply.map(2);
  ctx.reply.bulk("matches");
  ctx.reply.array(matches.size());
  for (const LcsMatch& m : matches) {
    ctx.reply.array(withmatchlen ? 3 : 2);
    ctx.reply.array(2);
    ctx.reply.integer(m.a_start);
    ctx.reply.integer(m.a_end);
    ctx.reply.array(2);
    ctx.reply.integer(m.b_start);
    ctx.reply.integer(m.b_end);
    if (withmatchlen) ctx.reply.integer(m.a_end - m.a_start + 1);
  }
  ctx.reply.bulk("len");
  ctx.reply.integer(len);
}

// Reads a value whole; a missing key is "". False if the handler is done.
bool read_string(CommandContext& ctx, std::string_view key, std::string* out) {
  Result<ObjectView> v = ctx.store.read_resident(key, ResidentRead::whole(touches(ctx)));
  if (awaiting_flash(ctx, v)) return false;
  if (v) {
    *out = v->to_string();
  } else if (v.status().code() != StatusCode::kNotFound) {
    ctx.reply.error(v.status());
    return false;
  }
  return true;
}

void lcs_command(CommandContext& ctx) {
  std::string a, b;
  if (!read_string(ctx, ctx.arg(1), &a) || !read_string(ctx, ctx.arg(2), &b)) return;
  LcsOptions o;
  if (!parse_lcs_options(ctx, &o)) return;
  if (a.size() >= UINT32_MAX - 1 || b.size() >= UINT32_MAX - 1)
    return ctx.reply.error("ERR String too long for LCS");
  // Redis bounds the table by proto-max-bulk-len (512 MiB).
  if ((a.size() + 1) * (b.size() + 1) * sizeof(uint32_t) > uint64_t{512} * 1024 * 1024)
    return ctx.reply.error(
        "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
  LcsTable table(a, b);
  if (o.len) return ctx.reply.integer(table.length());
  std::string result;
  std::vector<LcsMatch> matches;
  table.walk(o.minmatchlen, &result, &matches);
  if (o.idx) return reply_idx(ctx, matches, table.length(), o.withmatchlen);
  ctx.reply.bulk(result);
}

}  // namespace

void register_lcs_commands(CommandTable& table) {
  table.add({"lcs", -3, kReadOnly | kReadsValue, 1, 2, 1, lcs_command,
             "Longest common subsequence of two values"});
}

}  // namespace tierkv::server
