#include "server/commands/glob.h"

#include <gtest/gtest.h>

#include <string>

namespace tierkv::server {
namespace {

using namespace std::string_literals;

TEST(GlobTest, LiteralsAndWildcards) {
  EXPECT_TRUE(glob_match("abc", "abc"));
  EXPECT_FALSE(glob_match("abc", "abd"));
  EXPECT_FALSE(glob_match("abc", "abcd"));
  EXPECT_TRUE(glob_match("a*", "a"));
  EXPECT_TRUE(glob_match("a*", "abcdef"));
  EXPECT_TRUE(glob_match("*f", "abcdef"));
  EXPECT_TRUE(glob_match("a*d*f", "abcdef"));
  EXPECT_FALSE(glob_match("a*d*g", "abcdef"));
  EXPECT_TRUE(glob_match("a**", "a"));
  EXPECT_TRUE(glob_match("h?llo", "hello"));
  EXPECT_FALSE(glob_match("h?llo", "hllo"));
  EXPECT_TRUE(glob_match("", ""));
  EXPECT_FALSE(glob_match("", "a"));
  // Like Redis: the empty subject is only matched by callers' "*" shortcut.
  EXPECT_FALSE(glob_match("*", ""));
  EXPECT_TRUE(glob_matches_all("*"));
  EXPECT_FALSE(glob_matches_all("**"));
}

TEST(GlobTest, Sets) {
  EXPECT_TRUE(glob_match("h[ae]llo", "hallo"));
  EXPECT_TRUE(glob_match("h[ae]llo", "hello"));
  EXPECT_FALSE(glob_match("h[ae]llo", "hillo"));
  EXPECT_TRUE(glob_match("h[^e]llo", "hallo"));
  EXPECT_FALSE(glob_match("h[^e]llo", "hello"));
  EXPECT_TRUE(glob_match("h[a-b]llo", "hbllo"));
  EXPECT_TRUE(glob_match("h[b-a]llo", "hallo"));  // reversed bounds are swapped
  EXPECT_FALSE(glob_match("h[a-b]llo", "hcllo"));
  EXPECT_TRUE(glob_match("k[\\]]", "k]"));
  EXPECT_TRUE(glob_match("k[\\-]", "k-"));
  // An unterminated set ends at the end of the pattern.
  EXPECT_TRUE(glob_match("k[ab", "ka"));
  EXPECT_FALSE(glob_match("k[ab", "kc"));
  EXPECT_FALSE(glob_match("k[", "k"));
}

TEST(GlobTest, Escapes) {
  EXPECT_TRUE(glob_match("a\\*b", "a*b"));
  EXPECT_FALSE(glob_match("a\\*b", "axb"));
  EXPECT_TRUE(glob_match("a\\?", "a?"));
  EXPECT_FALSE(glob_match("a\\?", "ab"));
  EXPECT_TRUE(glob_match("a\\", "a\\"));  // a trailing backslash is literal
}

TEST(GlobTest, BinarySafe) {
  EXPECT_TRUE(glob_match("a\0*"s, "a\0bc"s));
  EXPECT_FALSE(glob_match("a\0*"s, "a\1bc"s));
  EXPECT_TRUE(glob_match("?\xff", "\0\xff"s));
  // Bytes compare as signed chars in ranges, as in Redis: \x80..\xff sort below 'a'.
  EXPECT_TRUE(glob_match("[\x80-a]", "\xff"));
  EXPECT_FALSE(glob_match("[a-z]", "\xff"));
}

TEST(GlobTest, PathologicalPatternFinishesQuickly) {
  std::string subject(5000, 'a');
  std::string pattern;
  for (int i = 0; i < 50; ++i) pattern += "*a";
  pattern += "b";
  EXPECT_FALSE(glob_match(pattern, subject));
}

}  // namespace
}  // namespace tierkv::server
