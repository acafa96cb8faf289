#include "server/net/hardening.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "server/commands/command.h"

namespace tierkv::server {

const std::string_view kProtectedModeDenied =
    "-DENIED Redis is running in protected mode because protected mode is enabled and no "
    "password is set for the default user. In this mode connections are only accepted from the "
    "loopback interface. If you want to connect from external computers to Redis you may adopt "
    "one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG "
    "SET protected-mode no' from the loopback interface by connecting to Redis from the same host "
    "the server is running, however MAKE SURE Redis is not publicly accessible from internet if "
    "you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just "
    "disable the protected mode by editing the Redis configuration file, and setting the "
    "protected mode option to 'no', and then restarting the server. 3) If you started the server "
    "manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an "
    "authentication password for the default user. NOTE: You only need to do one of the above "
    "things in order for the server to start accepting connections from the outside.\r\n";

bool peer_is_loopback(const asio::ip::address& peer) {
  if (peer.is_v6() && peer.to_v6().is_v4_mapped())
    return asio::ip::make_address_v4(asio::ip::v4_mapped, peer.to_v6()).is_loopback();
  return peer.is_loopback();
}

bool protected_mode_refuses(bool protected_mode, bool auth_required,
                            const asio::ip::address& peer) {
  return protected_mode && !auth_required && !peer_is_loopback(peer);
}

int64_t fd_reserve(const Config& config) {
  int64_t threads = config.io_threads > 0
                        ? config.io_threads
                        : static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  return 32 + config.metrics_max_clients + 4 * threads;
}

OpenFilesFit fit_open_files(int64_t maxclients, int64_t reserve) {
  rlimit now{};
  if (getrlimit(RLIMIT_NOFILE, &now) != 0) return {maxclients, 0, errno};
  uint64_t want = static_cast<uint64_t>(maxclients + reserve);
  if (now.rlim_cur == RLIM_INFINITY || now.rlim_cur >= want)
    return {maxclients, static_cast<uint64_t>(now.rlim_cur), 0};
  rlimit next = now;
  next.rlim_cur = want;
  if (now.rlim_max != RLIM_INFINITY && now.rlim_max < want) next.rlim_max = want;
  if (setrlimit(RLIMIT_NOFILE, &next) == 0) return {maxclients, want, 0};
  int err = errno;
  // Not that far: take as much as the hard limit allows without privilege.
  if (now.rlim_max != RLIM_INFINITY && now.rlim_max > now.rlim_cur) {
    next = now;
    next.rlim_cur = now.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &next) == 0) now = next;
  }
  int64_t fits = static_cast<int64_t>(now.rlim_cur) - reserve;
  return {std::max<int64_t>(fits, 0), static_cast<uint64_t>(now.rlim_cur), err};
}

Status fit_maxclients_to_fd_limit(const Config& next) {
  OpenFilesFit fit = fit_open_files(next.maxclients, fd_reserve(next));
  if (fit.maxclients >= next.maxclients) return Status::ok();
  return Status::invalid_argument(fmt::format(
      "The operating system is not able to handle the specified number of clients, try with {}",
      fit.maxclients));
}

bool accept_error_pauses(const asio::error_code& ec) {
  if (ec.category() != asio::system_category()) return true;
  switch (ec.value()) {
    case ECONNABORTED:
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case EAGAIN:
    case EINTR:
      return false;
    default:
      return true;
  }
}

}  // namespace tierkv::server
