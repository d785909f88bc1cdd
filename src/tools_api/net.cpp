#include "tools_api/net.hpp"

#include "transport/bootstrap.hpp"

namespace tandem::tools_api {

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
