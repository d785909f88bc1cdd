#include "transport/tcp/context.hpp"

#include "transport/tcp/connector.hpp"
#include "transport/tcp/endpoint.hpp"
#include "transport/tcp/wire.hpp"

#include <tandem/error.hpp>

#include <utility>

namespace tandem::transport::tcp {

Context::Context(int rank, int size, std::string address, std::string token)
    : rank_(rank), size_(size), address_(std::move(address)), token_(std::move(token)) {
  listener_ = net::listen_tcp(address_, 0, 4096);
  // Accepted sockets inherit the buffer sizes, and the window scale is fixed at the SYN.
  net::set_buffer_sizes(listener_.get(), kSocketBuffer, kSocketBuffer);
  net::set_nonblocking(listener_.get(), true);
  port_ = net::bound_port(listener_.get());
  connector_ = std::make_unique<Connector>(rank_, size_, token_, listener_, rejected_);
}

Context::~Context() = default;

std::unique_ptr<transport::Endpoint> Context::make_endpoint(int peer, std::vector<net::Fd> data,
                                                            PeerFailureHandler& failures) const {
  return std::make_unique<Endpoint>(peer, failures, std::move(data));
}

}  // namespace tandem::transport::tcp
