#include "coordinator/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rpc/channel.h"

namespace tandem::coordinator {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr int kRequestSeconds = 5;      // the whole exchange: request in, response out
constexpr size_t kMaxConnections = 32;  // served at once

}  // namespace

std::string MetricsHttpResponse(const std::string& request,
                                const std::function<std::string()>& metrics) {
  const auto respond = [](const char* status, const char* type, const std::string& body) {
    return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                        "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  };
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  const size_t first = line.find(' ');
  const size_t second = first == std::string::npos ? first : line.find(' ', first + 1);
  if (line_end == std::string::npos || second == std::string::npos ||
      line.compare(second + 1, 5, "HTTP/") != 0) {
    return respond("400 Bad Request", "text/plain", "bad request\n");
  }
  const std::string method = line.substr(0, first);
  std::string path = line.substr(first + 1, second - first - 1);
  path = path.substr(0, path.find('?'));
  if (path != "/metrics" && path != "/healthz") {
    return respond("404 Not Found", "text/plain", "not found: serves /metrics and /healthz\n");
  }
  if (method != "GET") return respond("405 Method Not Allowed", "text/plain", "GET only\n");
  if (path == "/healthz") return respond("200 OK", "text/plain", "ok\n");
  return respond("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics());
}

namespace {

// One client: its request as it arrives, then the response as it leaves, within one deadline.
struct Connection {
  int fd = -1;
  std::string request;
  std::string response;  // non-empty once the request is complete
  size_t sent = 0;
  std::chrono::steady_clock::time_point deadline;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, std::function<std::string()> metrics) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen: '", listen, "' is not HOST:PORT"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                                   std::to_string(port).c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen: cannot resolve '", host, "': ", gai_strerror(resolved)));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      error = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("--metrics-listen: cannot listen on ", listen, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const int stop = eventfd(0, EFD_CLOEXEC);
  if (stop < 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(fd, stop, rpc::WithPort(listen, bound_port), std::move(metrics)));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int stop_fd, std::string address,
                                     std::function<std::string()> metrics)
    : listen_fd_(listen_fd),
      stop_fd_(stop_fd),
      address_(std::move(address)),
      metrics_(std::move(metrics)) {}

MetricsHttpServer::~MetricsHttpServer() {
  const uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(stop_fd_);
}

void MetricsHttpServer::Serve() {
  using SteadyClock = std::chrono::steady_clock;
  // Accepting must never wait: the loop takes the clients poll reported, then polls again.
  fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  std::vector<Connection> connections;
  const auto close_all = [&] {
    for (const Connection& c : connections) close(c.fd);
  };
  while (true) {
    // A newcomer is taken while there is room, or a client still sending its request to make room
    // (below); when every client is being answered, further ones wait in the kernel's backlog.
    const auto has_room = [&] {
      return connections.size() < kMaxConnections ||
             std::any_of(connections.begin(), connections.end(),
                         [](const Connection& c) { return c.response.empty(); });
    };
    std::vector<pollfd> fds = {{stop_fd_, POLLIN, 0},
                               {listen_fd_, static_cast<short>(has_room() ? POLLIN : 0), 0}};
    SteadyClock::time_point next_deadline = SteadyClock::time_point::max();
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.response.empty() ? POLLIN : POLLOUT), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    int wait_ms = -1;
    if (!connections.empty()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - SteadyClock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()) + 1);
    }
    if (poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      close_all();
      return;
    }
    if (fds[0].revents != 0) {  // stopping: nothing waits for a client
      close_all();
      return;
    }
    std::vector<Connection> kept;
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      const short events = fds[i + 2].revents;
      bool done = false;
      if (events != 0 && c.response.empty()) {
        char buffer[1024];
        const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
        if (n > 0) c.request.append(buffer, static_cast<size_t>(n));
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) done = c.request.empty();
        if (!done && (n == 0 || c.request.find("\r\n\r\n") != std::string::npos ||
                      c.request.size() >= kMaxRequestBytes)) {
          c.response = MetricsHttpResponse(c.request, metrics_);
        }
      } else if (events != 0) {
        const ssize_t n =
            send(c.fd, c.response.data() + c.sent, c.response.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) c.sent += static_cast<size_t>(n);
        done = c.sent == c.response.size() || (n < 0 && errno != EINTR && errno != EAGAIN);
      }
      if (done || SteadyClock::now() >= c.deadline) {  // one deadline for the whole exchange
        close(c.fd);
      } else {
        kept.push_back(std::move(c));
      }
    }
    connections = std::move(kept);
    if (fds[1].revents != 0) {
      while (has_room()) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        if (connections.size() >= kMaxConnections) {
          // Full: the client that has waited longest without finishing its request makes room. A
          // scraper sends its request as it connects, so idle connections (a port scan, a leak, an
          // attack) cannot keep it waiting behind them.
          const auto oldest = std::min_element(
              connections.begin(), connections.end(), [](const Connection& a, const Connection& b) {
                return a.response.empty() != b.response.empty() ? a.response.empty()
                                                                : a.deadline < b.deadline;
              });
          close(oldest->fd);
          connections.erase(oldest);
        }
        connections.push_back(
            {fd, "", "", 0, SteadyClock::now() + std::chrono::seconds(kRequestSeconds)});
      }
    }
  }
}

}  // namespace tandem::coordinator
