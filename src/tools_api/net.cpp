#include "tools_api/net.hpp"

#include "core/net.hpp"
#include "transport/bootstrap.hpp"

#include <unistd.h>

namespace tandem::tools_api {
namespace {

// The layer's owned descriptor handed over to the tools' own.
Fd adopt(net::Fd fd) noexcept {
  return Fd(fd.release());
}

}  // namespace

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);  // close() errors are not actionable here
  fd_ = fd;
}

HostPort parse_host_port(std::string_view text, std::optional<std::uint16_t> default_port) {
  net::HostPort hp = net::parse_host_port(text, default_port);
  return {std::move(hp.host), hp.port};
}

std::optional<std::uint16_t> parse_port(std::string_view text, bool allow_zero) noexcept {
  return net::parse_port(text, allow_zero);
}

std::string format_host_port(std::string_view host, std::uint16_t port) {
  return net::format_host_port(host, port);
}

std::vector<sockaddr_storage> resolve(std::string_view host) {
  std::vector<sockaddr_storage> out;
  for (const net::SockAddr& a : net::resolve(host, 0)) out.push_back(a.storage);
  return out;
}

Fd listen_tcp(std::string_view bind_addr, std::uint16_t port) {
  return adopt(net::listen_tcp(bind_addr, port));
}

Fd reserve_tcp_port(std::string_view bind_addr) {
  return adopt(net::reserve_tcp_port(bind_addr));
}

std::uint16_t bound_port(int fd) {
  return net::bound_port(fd);
}

Fd connect_tcp(std::string_view host, std::uint16_t port, Deadline deadline) {
  return adopt(net::connect_tcp(host, port, deadline));
}

void set_nonblocking(int fd) {
  net::set_nonblocking(fd);
}

int poll_timeout_ms(Deadline deadline) noexcept {
  return net::poll_timeout_ms(deadline);
}

std::string local_host_name() {
  return net::local_host_name();
}

IfnameSetting socket_ifname_setting() {
  transport::IfnameSetting s = transport::socket_ifname_setting();
  return {std::move(s.list), std::move(s.variable)};
}

std::string choose_listen_address(const std::string& ifname, std::string_view source) {
  return transport::choose_listen_address(ifname, source);
}

std::size_t shm_buffer_setting() {
  return transport::shm_buffer_setting();
}

std::size_t shm_bytes_needed(int local_ranks, std::size_t buffer_bytes) {
  return transport::shm_bytes_needed(local_ranks, buffer_bytes);
}

}  // namespace tandem::tools_api
