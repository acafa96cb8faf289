// Sha256: an incremental SHA-256 (OpenSSL's EVP), for preheat's DIGEST
// check: update() with the bytes in order, then hex() once.
#pragma once

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace tierkv {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::string_view bytes) { EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()); }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_, digest, &n);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
      out += kHex[digest[i] >> 4];
      out += kHex[digest[i] & 15];
    }
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

// 64 lower-case hex digits: how a DIGEST names a SHA-256.
inline bool is_sha256_hex(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(),
                                       [](char c) { return std::isxdigit(c) && !std::isupper(c); });
}

}  // namespace tierkv
