// Server hardening in Redis's manner: protected mode, the open-files limit
// that maxclients needs, and backing off when accept() runs out of fds.
#pragma once

#include <asio.hpp>

#include <cstdint>
#include <string_view>

#include "core/config.h"
#include "core/status.h"

namespace tierkv::server {

// Redis 7.0's reply to a client refused by protected mode (then it closes),
// byte for byte, its "Setup a an" included (7.2 reworded it).
extern const std::string_view kProtectedModeDenied;

// 127.0.0.0/8, ::1, and IPv4-mapped 127.x.
bool peer_is_loopback(const asio::ip::address& peer);
// Protected mode refuses a TCP peer that is not loopback while no password
// is set (Unix socket clients are always served).
bool protected_mode_refuses(bool protected_mode, bool auth_required, const asio::ip::address& peer);

// File descriptors kept for the server's own use beyond one per client:
// 32 as Redis keeps, plus the metrics endpoint's clients and each I/O
// thread's event fds.
int64_t fd_reserve(const Config& config);

struct OpenFilesFit {
  int64_t maxclients = 0;  // how many clients fit under the limit now in force
  uint64_t limit = 0;      // RLIMIT_NOFILE's soft limit after the attempt
  int raise_errno = 0;     // why raising it failed (0: it did not fail)
};
// Raises RLIMIT_NOFILE to maxclients + reserve (as far as the hard limit, or
// beyond with the privilege), as Redis's adjustOpenFilesLimit() does.
OpenFilesFit fit_open_files(int64_t maxclients, int64_t reserve);

// The apply function of CONFIG SET maxclients: OK if the fd limit holds
// `next.maxclients` clients (raising it if needed), else Redis's error.
Status fit_maxclients_to_fd_limit(const Config& next);

// False for the accept() errors that belong to one pending connection
// (accept(2): ECONNABORTED, EPROTO, EPERM and the network errors it passes
// on): the next accept may succeed at once. True for the rest (EMFILE,
// ENFILE, ENOBUFS, ENOMEM, ...), which would fail again at once: the
// acceptor pauses instead of spinning.
bool accept_error_pauses(const asio::error_code& ec);

}  // namespace tierkv::server
