#include "server/net/tls_context.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <sstream>

namespace tierkv::server {
namespace {

// OpenSSL's queued errors, oldest first, as one line (and the queue cleared).
std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof(text));
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

Status tls_error(std::string_view what) {
  return Status::invalid_argument(fmt::format("{}: {}", what, openssl_errors()));
}

// "TLSv1.2 TLSv1.3" to the lowest and highest version; empty: both.
Status set_protocols(SSL_CTX* ctx, const std::string& protocols) {
  int low = 0, high = 0;
  std::istringstream words(protocols.empty() ? "TLSv1.2 TLSv1.3" : protocols);
  for (std::string w; words >> w;) {
    int v;
    if (w == "TLSv1.2") {
      v = TLS1_2_VERSION;
    } else if (w == "TLSv1.3") {
      v = TLS1_3_VERSION;
    } else if (w == "TLSv1.1") {
      v = TLS1_1_VERSION;
    } else if (w == "TLSv1") {
      v = TLS1_VERSION;
    } else {
      return Status::invalid_argument(fmt::format("unknown TLS protocol '{}' in tls-protocols", w));
    }
    low = low == 0 ? v : std::min(low, v);
    high = std::max(high, v);
  }
  if (low == 0) return Status::invalid_argument("tls-protocols names no protocol");
  SSL_CTX_set_min_proto_version(ctx, low);
  SSL_CTX_set_max_proto_version(ctx, high);
  return Status::ok();
}

Status load_files(asio::ssl::context& context, const Config& c) {
  SSL_CTX* ctx = context.native_handle();
  if (c.tls_cert_file.empty() || c.tls_key_file.empty())
    return Status::invalid_argument("TLS needs tls-cert-file and tls-key-file");
  const std::string pass = c.tls_key_file_pass;
  context.set_password_callback(
      [pass](size_t, asio::ssl::context::password_purpose) { return pass; });
  if (SSL_CTX_use_certificate_chain_file(ctx, c.tls_cert_file.c_str()) != 1)
    return tls_error(fmt::format("cannot load the certificate {}", c.tls_cert_file));
  if (SSL_CTX_use_PrivateKey_file(ctx, c.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return tls_error(fmt::format("cannot load the private key {}", c.tls_key_file));
  if (SSL_CTX_check_private_key(ctx) != 1)
    return tls_error("the private key does not match the certificate");
  const bool verify = c.tls_auth_clients != TlsAuthClients::kNo;
  if (c.tls_ca_cert_file.empty() && c.tls_ca_cert_dir.empty()) {
    if (verify)
      return Status::invalid_argument(
          "either tls-ca-cert-file or tls-ca-cert-dir must be set when tls-auth-clients is yes "
          "or optional");
    return Status::ok();
  }
  const char* file = c.tls_ca_cert_file.empty() ? nullptr : c.tls_ca_cert_file.c_str();
  const char* dir = c.tls_ca_cert_dir.empty() ? nullptr : c.tls_ca_cert_dir.c_str();
  if (SSL_CTX_load_verify_locations(ctx, file, dir) != 1)
    return tls_error("cannot load the CA certificates");
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<asio::ssl::context>> make_tls_context(const Config& c) {
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX* ctx = context->native_handle();
  uint64_t options = SSL_OP_NO_SSLv2 | SSL_OP_NO_SSLv3 | SSL_OP_NO_COMPRESSION |
                     SSL_OP_NO_RENEGOTIATION | SSL_OP_SINGLE_DH_USE;
  if (c.tls_prefer_server_ciphers) options |= SSL_OP_CIPHER_SERVER_PREFERENCE;
  SSL_CTX_set_options(ctx, options);
  // Partial writes let a large value go out record by record.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  TIERKV_RETURN_IF_ERROR(set_protocols(ctx, c.tls_protocols));
  if (!c.tls_ciphers.empty() && SSL_CTX_set_cipher_list(ctx, c.tls_ciphers.c_str()) != 1)
    return tls_error(fmt::format("tls-ciphers '{}'", c.tls_ciphers));
  if (!c.tls_ciphersuites.empty() && SSL_CTX_set_ciphersuites(ctx, c.tls_ciphersuites.c_str()) != 1)
    return tls_error(fmt::format("tls-ciphersuites '{}'", c.tls_ciphersuites));
  TIERKV_RETURN_IF_ERROR(load_files(*context, c));
  int verify = SSL_VERIFY_NONE;
  if (c.tls_auth_clients == TlsAuthClients::kYes)
    verify = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  if (c.tls_auth_clients == TlsAuthClients::kOptional) verify = SSL_VERIFY_PEER;
  SSL_CTX_set_verify(ctx, verify, nullptr);
  // Resumed sessions skip the full handshake, as Redis allows.
  static constexpr unsigned char kSessionContext[] = "tierkv";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof(kSessionContext) - 1);
  return context;
}

Result<std::shared_ptr<ssl_ctx_st>> make_tls_client_context(const Config& c) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (!ctx) return tls_error("cannot make a TLS client context");
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_SSLv2 | SSL_OP_NO_SSLv3 | SSL_OP_NO_COMPRESSION);
  TIERKV_RETURN_IF_ERROR(set_protocols(ctx.get(), c.tls_protocols));
  if (!c.tls_ciphers.empty() && SSL_CTX_set_cipher_list(ctx.get(), c.tls_ciphers.c_str()) != 1)
    return tls_error(fmt::format("tls-ciphers '{}'", c.tls_ciphers));
  if (!c.tls_ciphersuites.empty() &&
      SSL_CTX_set_ciphersuites(ctx.get(), c.tls_ciphersuites.c_str()) != 1)
    return tls_error(fmt::format("tls-ciphersuites '{}'", c.tls_ciphersuites));
  if (c.tls_key_file_pass.empty()) {
    SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), nullptr);
  } else {
    // OpenSSL keeps the pointer: the context owns a copy through ex data
    // would be heavier; the config's string outlives the load below.
    SSL_CTX_set_default_passwd_cb_userdata(ctx.get(),
                                           const_cast<char*>(c.tls_key_file_pass.c_str()));
  }
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), c.tls_cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx.get(), c.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return tls_error("tls-cluster: cannot load tls-cert-file and tls-key-file");
  SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), nullptr);
  const char* file = c.tls_ca_cert_file.empty() ? nullptr : c.tls_ca_cert_file.c_str();
  const char* dir = c.tls_ca_cert_dir.empty() ? nullptr : c.tls_ca_cert_dir.c_str();
  if (file == nullptr && dir == nullptr)
    return Status::invalid_argument("tls-cluster needs tls-ca-cert-file or tls-ca-cert-dir");
  if (SSL_CTX_load_verify_locations(ctx.get(), file, dir) != 1)
    return tls_error("tls-cluster: cannot load the CA certificates");
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  return ctx;
}

Status TlsContextHolder::reload(const Config& config) {
  Result<std::shared_ptr<asio::ssl::context>> built = make_tls_context(config);
  if (!built.is_ok()) return built.status();
  std::shared_ptr<ssl_ctx_st> client;
  if (config.tls_cluster) {
    Result<std::shared_ptr<ssl_ctx_st>> made = make_tls_client_context(config);
    if (!made.is_ok()) return made.status();
    client = std::move(*made);
  }
  MutexLock lock(mu_);
  context_ = std::move(*built);
  client_ = std::move(client);
  return Status::ok();
}

}  // namespace tierkv::server
