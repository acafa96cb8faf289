// The server's TLS context, built from the tls-* keys as Redis builds its
// own (tls.c): the certificate chain and key (with its passphrase), the CAs
// client certificates are checked against, whether clients must show one
// (tls-auth-clients), the protocol versions, ciphers and cipher suites, and
// whose cipher order wins. SSLv2/3, TLS compression and renegotiation by
// the client are off.
//
// A context is immutable once built: CONFIG SET of a tls-* key builds a new
// one for the connections to come (TlsContextHolder), and connections keep
// the one they were accepted with. A build that fails (a missing file, a
// key that does not match its certificate) changes nothing.
#pragma once

#include <asio/ssl.hpp>

#include <memory>

#include "core/config.h"
#include "core/mutex.h"
#include "core/status.h"

namespace tierkv::server {

Result<std::shared_ptr<asio::ssl::context>> make_tls_context(const Config& config);
// The client side, for a node's links to the others (tls-cluster): the
// same certificate and key (a node shows them to its peers, as Redis's
// nodes do), and the peer's certificate must chain to the same CAs.
Result<std::shared_ptr<ssl_ctx_st>> make_tls_client_context(const Config& config);

// The contexts new TLS connections get, server side and (with
// tls-cluster) client side; any thread.
class TlsContextHolder {
 public:
  std::shared_ptr<asio::ssl::context> get() const {
    MutexLock lock(mu_);
    return context_;
  }
  std::shared_ptr<ssl_ctx_st> client() const {
    MutexLock lock(mu_);
    return client_;
  }
  // Builds from `config` and, if that works, serves them from now on.
  Status reload(const Config& config);

 private:
  mutable Mutex mu_;
  std::shared_ptr<asio::ssl::context> context_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ssl_ctx_st> client_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tierkv::server
