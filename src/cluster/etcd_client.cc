#include "cluster/etcd_client.h"

#include <openssl/evp.h>

#include <nlohmann/json.hpp>

#include "core/curl_handle.h"

namespace tierkv::cluster {
namespace {

using nlohmann::json;

// proto3's JSON mapping writes 64-bit integers as strings and leaves out
// fields that hold their default (0, false, empty).
int64_t int_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  return it->get<int64_t>();
}

std::string bytes_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) return {};
  Result<std::string> raw = base64_decode(it->get<std::string>());
  if (!raw.is_ok()) throw json::other_error::create(501, "bad base64", &j);
  return std::move(*raw);
}

EtcdKeyValue key_value_of(const json& kv) {
  return {bytes_field(kv, "key"), bytes_field(kv, "value"), int_field(kv, "create_revision"),
          int_field(kv, "mod_revision"), int_field(kv, "lease")};
}

size_t append_body(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// Parses a reply; Corruption if it is not JSON, etcd's error if it is one.
Result<json> parse_reply(const std::string& body, long http_code) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::corruption("etcd: not a JSON reply (HTTP " + std::to_string(http_code) + ")");
  if (j.contains("error") || http_code != 200) {
    const std::string message = j.value("message", j.value("error", std::string("HTTP error")));
    if (message.find("not found") != std::string::npos)
      return Status::not_found("etcd: " + message);
    if (message.find("compacted") != std::string::npos) return Status::conflict("etcd: " + message);
    return Status::io_error("etcd: " + message);
  }
  return j;
}

// A call's reply, parsed.
Result<json> parsed(Result<std::string> body) {
  if (!body.is_ok()) return body.status();
  return parse_reply(*body, 200);
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return Status::invalid_argument("base64: length not a multiple of 4");
  std::string out(3 * text.size() / 4, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return Status::invalid_argument("base64: not base64");
  // EVP_DecodeBlock counts padding as zero bytes.
  size_t padding = 0;
  for (size_t i = text.size(); i > 0 && text[i - 1] == '=' && padding < 2; --i) ++padding;
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key (etcd's convention)
}

EtcdClient::EtcdClient(Options options)
    : options_(std::move(options)), curl_(std::make_unique<CurlHandle>()) {}

EtcdClient::~EtcdClient() = default;

void EtcdClient::secure(void* handle) {
  CURL* c = static_cast<CURL*>(handle);
  const EtcdSecurity& s = options_.security;
  if (!s.cacert.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, s.cacert.c_str());
  if (!s.cert.empty()) curl_easy_setopt(c, CURLOPT_SSLCERT, s.cert.c_str());
  if (!s.key.empty()) curl_easy_setopt(c, CURLOPT_SSLKEY, s.key.c_str());
  if (headers_) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers_.get());
}

Status EtcdClient::log_in() {
  token_.clear();
  headers_.reset();
  long code = 0;
  const json body{{"name", options_.security.user}, {"password", options_.security.password}};
  Result<json> j = parsed(call_once("/v3/auth/authenticate", body.dump(), &code));
  if (!j.is_ok())
    return Status::unavailable("etcd: login as '" + options_.security.user +
                               "' failed: " + j.status().message());
  token_ = j->value("token", "");
  if (token_.empty()) return Status::unavailable("etcd: login gave no token");
  curl_slist* list = curl_slist_append(nullptr, ("Authorization: " + token_).c_str());
  headers_ = std::unique_ptr<void, void (*)(void*)>(
      list, [](void* l) { curl_slist_free_all(static_cast<curl_slist*>(l)); });
  return Status::ok();
}

Result<std::string> EtcdClient::call(std::string_view path, const std::string& body) {
  const bool auth = !options_.security.user.empty();
  if (auth && token_.empty()) TIERKV_RETURN_IF_ERROR(log_in());
  long code = 0;
  Result<std::string> reply = call_once(path, body, &code);
  // etcd answers a token it no longer knows with 401 (gRPC Unauthenticated).
  if (auth && code == 401) {
    TIERKV_RETURN_IF_ERROR(log_in());
    reply = call_once(path, body, &code);
  }
  return reply;
}

Result<std::string> EtcdClient::call_once(std::string_view path, const std::string& body,
                                          long* code) {
  if (options_.endpoints.empty()) return Status::invalid_argument("etcd: no endpoint");
  Status last;
  for (size_t attempt = 0; attempt < options_.endpoints.size(); ++attempt) {
    const size_t which = (current_ + attempt) % options_.endpoints.size();
    const std::string url = options_.endpoints[which] + std::string(path);
    CURL* c = curl_->get();
    curl_easy_reset(c);
    std::string reply;
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout.count()));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply);
    secure(c);
    round_trips_.fetch_add(1, std::memory_order_relaxed);
    const CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) {
      current_ = which;
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
      if (*code == 200) return reply;
      Result<json> error = parse_reply(reply, *code);
      failures_.fetch_add(1, std::memory_order_relaxed);
      return error.is_ok() ? Status::io_error("etcd: HTTP " + std::to_string(*code))
                           : error.status();
    }
    failures_.fetch_add(1, std::memory_order_relaxed);
    last = Status::io_error("etcd " + options_.endpoints[which] + ": " + curl_easy_strerror(rc));
  }
  return last;
}

Result<int64_t> EtcdClient::grant_lease(int64_t ttl_seconds) {
  Result<json> j = parsed(call("/v3/lease/grant", json{{"TTL", ttl_seconds}}.dump()));
  if (!j.is_ok()) return j.status();
  const int64_t id = int_field(*j, "ID");
  if (id == 0) return Status::io_error("etcd: lease not granted: " + j->value("error", ""));
  return id;
}

Result<int64_t> EtcdClient::keep_alive(int64_t lease) {
  Result<json> j = parsed(call("/v3/lease/keepalive", json{{"ID", lease}}.dump()));
  if (!j.is_ok()) return j.status();
  const json& result = j->contains("result") ? (*j)["result"] : *j;
  const int64_t ttl = int_field(result, "TTL");
  if (ttl <= 0) return Status::not_found("etcd: lease " + std::to_string(lease) + " expired");
  return ttl;
}

Status EtcdClient::revoke(int64_t lease) {
  return call("/v3/lease/revoke", json{{"ID", lease}}.dump()).status();
}

Result<int64_t> EtcdClient::put(std::string_view key, std::string_view value, int64_t lease) {
  json req{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) req["lease"] = lease;
  Result<json> j = parsed(call("/v3/kv/put", req.dump()));
  if (!j.is_ok()) return j.status();
  return int_field(j->value("header", json::object()), "revision");
}

Result<bool> EtcdClient::put_if(std::string_view key, std::string_view value,
                                int64_t expected_mod_revision, int64_t lease) {
  const std::string k = base64_encode(key);
  json compare = expected_mod_revision == 0
                     ? json{{"target", "CREATE"}, {"key", k}, {"create_revision", 0}}
                     : json{{"target", "MOD"}, {"key", k}, {"mod_revision", expected_mod_revision}};
  compare["result"] = "EQUAL";
  json put{{"key", k}, {"value", base64_encode(value)}};
  if (lease != 0) put["lease"] = lease;
  const json req{{"compare", json::array({compare})},
                 {"success", json::array({json{{"request_put", put}}})}};
  Result<json> j = parsed(call("/v3/kv/txn", req.dump()));
  if (!j.is_ok()) return j.status();
  return j->value("succeeded", false);
}

Result<EtcdRange> EtcdClient::range(const std::string& request) {
  Result<json> j = parsed(call("/v3/kv/range", request));
  if (!j.is_ok()) return j.status();
  EtcdRange out;
  try {
    out.revision = int_field(j->value("header", json::object()), "revision");
    for (const json& kv : j->value("kvs", json::array())) out.kvs.push_back(key_value_of(kv));
  } catch (const std::exception& e) {
    return Status::corruption(std::string("etcd: range reply: ") + e.what());
  }
  return out;
}

Result<EtcdRange> EtcdClient::get(std::string_view key) {
  return range(json{{"key", base64_encode(key)}}.dump());
}

Result<EtcdRange> EtcdClient::get_prefix(std::string_view prefix) {
  return range(
      json{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}}
          .dump());
}

Status EtcdClient::del(std::string_view key) {
  return call("/v3/kv/deleterange", json{{"key", base64_encode(key)}}.dump()).status();
}

namespace {

// The watch stream: one JSON object per line, each {"result": {...}}.
struct WatchStream {
  std::string pending;
  const std::function<bool(const std::vector<EtcdEvent>&)>* on_events = nullptr;
  Status status;
  bool done = false;

  // False to stop the transfer.
  bool take_line(std::string_view line) {
    Result<json> j = parse_reply(std::string(line), 200);
    if (!j.is_ok()) return fail(j.status());
    const json& result = j->value("result", json::object());
    if (int_field(result, "compact_revision") != 0)
      return fail(Status::conflict("etcd: watch start revision was compacted"));
    if (result.value("canceled", false)) return fail(Status::io_error("etcd: watch canceled"));
    std::vector<EtcdEvent> events;
    try {
      for (const json& e : result.value("events", json::array()))
        events.push_back({e.value("type", std::string()) == "DELETE", key_value_of(e.at("kv"))});
    } catch (const std::exception& e) {
      return fail(Status::corruption(std::string("etcd: watch event: ") + e.what()));
    }
    if (events.empty()) return true;
    if (!(*on_events)(events)) {
      done = true;
      return false;
    }
    return true;
  }
  bool fail(Status st) {
    status = std::move(st);
    return false;
  }
};

size_t on_watch_data(char* data, size_t size, size_t n, void* user) {
  auto& stream = *static_cast<WatchStream*>(user);
  stream.pending.append(data, size * n);
  size_t start = 0;
  for (size_t end; (end = stream.pending.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string_view line(stream.pending.data() + start, end - start);
    if (line.find_first_not_of(" \r") == std::string_view::npos) continue;
    if (!stream.take_line(line)) return 0;  // aborts the transfer
  }
  stream.pending.erase(0, start);
  return size * n;
}

}  // namespace

Status EtcdClient::watch(std::string_view key, int64_t start_revision, std::stop_token stop,
                         const std::function<bool(const std::vector<EtcdEvent>&)>& on_events,
                         std::chrono::milliseconds max_duration) {
  json create{{"key", base64_encode(key)}};
  if (start_revision > 0) create["start_revision"] = start_revision;
  const std::string body = json{{"create_request", create}}.dump();
  const std::string url = options_.endpoints.at(current_) + "/v3/watch";
  CURL* c = curl_->get();
  curl_easy_reset(c);
  WatchStream stream;
  stream.on_events = &on_events;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.timeout.count()));
  if (max_duration.count() > 0)
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(max_duration.count()));
  // A peer that is gone shows; one that drops traffic silently needs the
  // deadline above.
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 5L);
  curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 2L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_watch_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &stream);
  secure(c);
  watch_stop(c, stop);
  round_trips_.fetch_add(1, std::memory_order_relaxed);
  const CURLcode rc = curl_easy_perform(c);
  if (stream.done || stop.stop_requested()) return Status::ok();
  if (!stream.status.is_ok()) return stream.status;
  if (rc == CURLE_OPERATION_TIMEDOUT && max_duration.count() > 0)
    return Status::busy("etcd watch: its deadline passed");  // not the endpoint's failure
  failures_.fetch_add(1, std::memory_order_relaxed);
  // The endpoint failed: the next call tries the others.
  current_ = (current_ + 1) % options_.endpoints.size();
  return Status::io_error(std::string("etcd watch: ") + curl_easy_strerror(rc));
}

}  // namespace tierkv::cluster
