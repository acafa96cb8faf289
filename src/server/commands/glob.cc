#include "server/commands/glob.h"

#include <utility>

namespace tierkv::server {
namespace {

// Redis bails out of deeply nested '*' recursion rather than blowing the stack.
constexpr int kMaxNesting = 1000;

// A transcription of Redis's stringmatchlen_impl() without the nocase mode.
// `skip_longer` is Redis's early exit: once the rest of the pattern after a
// '*' failed to match anywhere in the remaining subject, no earlier '*' can
// help by consuming more, so the whole match fails.
bool match(const char* p, size_t plen, const char* s, size_t slen, bool& skip_longer, int nesting) {
  if (nesting > kMaxNesting) return false;
  while (plen > 0 && slen > 0) {
    switch (p[0]) {
      case '*': {
        while (plen > 1 && p[1] == '*') {
          ++p;
          --plen;
        }
        if (plen == 1) return true;
        while (slen > 0) {
          if (match(p + 1, plen - 1, s, slen, skip_longer, nesting + 1)) return true;
          if (skip_longer) return false;
          ++s;
          --slen;
        }
        skip_longer = true;
        return false;
      }
      case '?':
        ++s;
        --slen;
        break;
      case '[': {
        ++p;
        --plen;
        bool negate = plen > 0 && p[0] == '^';
        if (negate) {
          ++p;
          --plen;
        }
        bool matched = false;
        for (;;) {
          if (plen == 0) {
            // Unterminated set: step back so the shared advance below ends the pattern.
            --p;
            ++plen;
            break;
          }
          if (p[0] == '\\' && plen >= 2) {
            ++p;
            --plen;
            if (p[0] == s[0]) matched = true;
          } else if (p[0] == ']') {
            break;
          } else if (plen >= 3 && p[1] == '-') {
            int lo = static_cast<signed char>(p[0]);
            int hi = static_cast<signed char>(p[2]);
            int c = static_cast<signed char>(s[0]);
            if (lo > hi) std::swap(lo, hi);
            p += 2;
            plen -= 2;
            if (c >= lo && c <= hi) matched = true;
          } else if (p[0] == s[0]) {
            matched = true;
          }
          ++p;
          --plen;
        }
        if (negate) matched = !matched;
        if (!matched) return false;
        ++s;
        --slen;
        break;
      }
      case '\\':
        if (plen >= 2) {
          ++p;
          --plen;
        }
        [[fallthrough]];
      default:
        if (p[0] != s[0]) return false;
        ++s;
        --slen;
        break;
    }
    ++p;
    --plen;
    if (slen == 0) {
      while (plen > 0 && p[0] == '*') {
        ++p;
        --plen;
      }
      break;
    }
  }
  return plen == 0 && slen == 0;
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view subject) {
  bool skip_longer = false;
  return match(pattern.data(), pattern.size(), subject.data(), subject.size(), skip_longer, 0);
}

bool glob_matches_all(std::string_view pattern) {
  return pattern == "*";
}

}  // namespace tierkv::server
