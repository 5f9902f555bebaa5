// Test helper: one raw HTTP exchange with a server on 127.0.0.1 (the coordinator's /metrics).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

namespace tandem::testing {

// A connected socket to HOST:PORT (-1 when the connection failed), for a client that holds it.
inline int HttpConnect(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` as is to HOST:PORT and returns everything the server sent until it closed; ""
// when the connection failed.
inline std::string HttpExchange(const std::string& address, const std::string& request) {
  const int fd = HttpConnect(address);
  if (fd < 0) return "";
  const timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string reply;
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply.append(buffer, n);
  }
  close(fd);
  return reply;
}

// GET `path` over HTTP/1.1.
inline std::string HttpGet(const std::string& address, const std::string& path) {
  return HttpExchange(address, "GET " + path + " HTTP/1.1\r\nHost: " + address + "\r\n\r\n");
}

}  // namespace tandem::testing
