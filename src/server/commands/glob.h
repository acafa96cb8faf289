// Glob-style pattern matching with Redis's stringmatchlen() semantics, used
// by KEYS and SCAN MATCH.
//
//   *      any run of bytes, including none
//   ?      exactly one byte
//   [abc]  one byte of the set; [^abc] one byte not in it; [a-z] a range
//          (reversed bounds are swapped); \x inside a set is a literal x
//   \x     the literal byte x
//
// Patterns and subjects are binary-safe. Like Redis, an unterminated set is
// closed at the end of the pattern, and bytes compare as signed chars in
// ranges, so a pattern matches exactly the keys Redis would match.
#pragma once

#include <string_view>

namespace tierkv::server {

bool glob_match(std::string_view pattern, std::string_view subject);

// True for "*", which Redis treats as match-all without matching (so it also
// matches the empty key, which glob_match("*", "") does not).
bool glob_matches_all(std::string_view pattern);

}  // namespace tierkv::server
