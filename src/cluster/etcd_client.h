// EtcdClient: the calls of etcd's v3 API the cluster needs, over etcd's
// JSON gateway (HTTP POST to /v3/..., keys and values base64), with
// libcurl: no gRPC. etcd 3.4 (Debian 12's etcd-server) serves it.
//
// Each call goes to the endpoint that answered last, then to the others in
// turn; it fails (IOError) only if none answers within the timeout. A reply
// that is not what etcd sends is Corruption; etcd's own errors (a lease
// that is gone, say) come back as their Status.
//
// Secured etcd: with https endpoints, `cacert` is the CA etcd's certificate
// must chain to, and `cert` / `key` this client's certificate (etcd's
// --client-cert-auth). With `user`, the client logs in (/v3/auth/
// authenticate) before its first call and sends the token with each; a
// token etcd no longer takes (it expired, or etcd restarted) is replaced by
// a new login and the call made again, once.
//
// Blocking, and not thread-safe: one client per thread (a curl handle keeps
// its connection). round_trips() and failures() count what it did.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tierkv {
class CurlHandle;
}

namespace tierkv::cluster {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdRange {
  std::vector<EtcdKeyValue> kvs;
  int64_t revision = 0;  // the store's revision when read
};

// One change a watch saw: a put (value set) or a delete.
struct EtcdEvent {
  bool deleted = false;
  EtcdKeyValue kv;
};

// How to reach a secured etcd (cluster-etcd-* keys; empty: not used).
struct EtcdSecurity {
  std::string cacert, cert, key;  // PEM files
  std::string user, password;
  bool operator==(const EtcdSecurity&) const = default;
};

class EtcdClient {
 public:
  struct Options {
    std::vector<std::string> endpoints;  // "http://127.0.0.1:2379"
    std::chrono::milliseconds timeout{2000};
    EtcdSecurity security;
  };
  explicit EtcdClient(Options options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // A lease of `ttl_seconds`; returns its id.
  Result<int64_t> grant_lease(int64_t ttl_seconds);
  // Renews the lease; returns the TTL left, NotFound if the lease is gone.
  Result<int64_t> keep_alive(int64_t lease);
  Status revoke(int64_t lease);

  // Writes `value`, attached to `lease` (0: none); returns the revision.
  Result<int64_t> put(std::string_view key, std::string_view value, int64_t lease = 0);
  // Writes `value` only if the key's mod revision is `expected_mod_revision`
  // (0: only if the key does not exist). False if it was not.
  Result<bool> put_if(std::string_view key, std::string_view value, int64_t expected_mod_revision,
                      int64_t lease = 0);
  Result<EtcdRange> get(std::string_view key);
  Result<EtcdRange> get_prefix(std::string_view prefix);
  Status del(std::string_view key);

  // Watches `key` from `start_revision` (0: from now), calling `on_events`
  // for each batch, until `stop` is requested, the callback returns false,
  // the connection fails (IOError: the caller re-reads and watches again
  // from the revision after the last one it saw), or `max_duration` (0: no
  // bound) has passed (Busy). A watch is silent while nothing changes, so
  // only a deadline tells a quiet key from a connection that drops traffic
  // without a reset. Compacted history is Conflict.
  Status watch(std::string_view key, int64_t start_revision, std::stop_token stop,
               const std::function<bool(const std::vector<EtcdEvent>&)>& on_events,
               std::chrono::milliseconds max_duration = {});

  uint64_t round_trips() const { return round_trips_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

 private:
  // POSTs `body` to `path` (e.g. "/v3/kv/put"); returns the reply body.
  // Logs in first, and again once if etcd refuses the token.
  Result<std::string> call(std::string_view path, const std::string& body);
  Result<std::string> call_once(std::string_view path, const std::string& body, long* code);
  // The TLS files and the token, on `c` (after curl_easy_reset).
  void secure(void* c);
  Status log_in();
  Result<EtcdRange> range(const std::string& body);

  Options options_;
  size_t current_ = 0;  // the endpoint that answered last
  std::unique_ptr<CurlHandle> curl_;
  std::string token_;  // etcd's auth token, once logged in
  std::unique_ptr<void, void (*)(void*)> headers_{nullptr, nullptr};  // curl_slist
  std::atomic<uint64_t> round_trips_{0}, failures_{0};
};

// Base64 (RFC 4648, with padding), as the gateway's bytes fields are.
std::string base64_encode(std::string_view bytes);
Result<std::string> base64_decode(std::string_view text);
// The end of the key range of every key that starts with `prefix`.
std::string prefix_end(std::string_view prefix);

}  // namespace tierkv::cluster
