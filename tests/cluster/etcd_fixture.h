// A single-member etcd for tests: its own data folder and free loopback
// ports, stopped (and its folder removed) on destruction. etcd comes from
// Debian's etcd-server, which scripts/install-deps.sh installs; without it
// the fixture fails the test, saying so.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "cluster/etcd_client.h"

namespace tierkv::cluster::testing {

// A loopback port nothing listens on now (the kernel's pick for port 0).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// Polls `cond` every 50 ms for at most `limit`; its last answer.
inline bool eventually(const std::function<bool()>& cond,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(15000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

class EtcdProcess {
 public:
  EtcdProcess() : client_port_(free_port()), peer_port_(free_port()) {
    dir_ = std::filesystem::temp_directory_path() /
           ("tierkv-etcd-" + std::to_string(::getpid()) + "-" + std::to_string(client_port_));
    std::filesystem::create_directories(dir_);
    start();
  }
  ~EtcdProcess() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
  bool running() const { return pid_ > 0; }
  // kill -9, as a crash; start() brings it back on the same data.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void start() {
    const std::string client = endpoint();
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    const std::string log = (dir_ / "etcd.log").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* out = std::freopen(log.c_str(), "a", stderr);
      (void)out;
      ::execlp("etcd", "etcd", "--name", "default", "--data-dir", (dir_ / "data").c_str(),
               "--listen-client-urls", client.c_str(), "--advertise-client-urls", client.c_str(),
               "--listen-peer-urls", peer.c_str(), "--initial-advertise-peer-urls", peer.c_str(),
               "--initial-cluster", ("default=" + peer).c_str(), nullptr);
      std::_Exit(127);
    }
    // Ready when it answers; at most 20 s.
    EtcdClient probe({{client}, std::chrono::milliseconds(500), {}});
    for (int i = 0; i < 200; ++i) {
      if (probe.get("ready?").is_ok()) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    stop();
    ADD_FAILURE() << "etcd did not start (is Debian's etcd-server installed? "
                     "scripts/install-deps.sh installs it); its log: "
                  << log;
  }

 private:
  int client_port_;
  int peer_port_;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
};

}  // namespace tierkv::cluster::testing
