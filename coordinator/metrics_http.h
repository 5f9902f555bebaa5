// The coordinator's HTTP endpoint for Prometheus: GET /metrics answers the exposition text
// (coordinator/metrics.h), GET /healthz answers "ok". A small HTTP/1.1 server: one thread serves
// up to 32 connections at once with non-blocking sockets, one request per connection (Connection:
// close), and gives each exchange, request in and response out, one 5 s deadline, after which the
// connection is closed; further clients wait in the listen backlog. So a slow or idle client holds
// one slot for 5 s at most, never a scrape, and stopping never waits for a client. Other paths get
// 404, other methods 405, a request that does not parse 400.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace tandem::coordinator {

// The whole response to one request's bytes (as much of them as arrived), `metrics` giving the
// exposition text: 200 for GET /metrics and /healthz (a query string ignored), 404 for other
// paths, 405 for other methods, 400 for a request line that does not parse. What the server sends;
// also the HTTP fuzzer's target.
std::string MetricsHttpResponse(const std::string& request,
                                const std::function<std::string()>& metrics);

class MetricsHttpServer {
 public:
  // Listens on `listen` (HOST:PORT; port 0 lets the OS pick). InvalidArgument for an address that
  // does not parse; Unavailable when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, std::function<std::string()> metrics);
  ~MetricsHttpServer();  // stops accepting and joins the thread

  // HOST:PORT with the bound port.
  const std::string& address() const { return address_; }

 private:
  MetricsHttpServer(int listen_fd, int stop_fd, std::string address,
                    std::function<std::string()> metrics);
  void Serve();

  const int listen_fd_;
  const int stop_fd_;  // an eventfd: written once to stop
  const std::string address_;
  const std::function<std::string()> metrics_;
  std::thread thread_;
};

}  // namespace tandem::coordinator
