#include "transport/ucx/context.hpp"

#include <tandem/error.hpp>

#include <filesystem>
#include <system_error>

#if TANDEM_HAVE_UCX
#include "transport/ucx/endpoint.hpp"
#endif

namespace tandem::transport::ucx {

bool rdma_device_present() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

Context::Context(int rank, std::unique_ptr<State> state) : rank_(rank), state_(std::move(state)) {}

#if TANDEM_HAVE_UCX

bool available() noexcept {
  return true;
}

namespace {

[[noreturn]] void fail(std::string_view what, ucs_status_t s) {
  TANDEM_THROW(ErrorCode::Io,
               "UCX could not {}: {}. Check UCX's own settings (UCX_TLS, UCX_NET_DEVICES; "
               "ucx_info -d lists the devices), or use tandem's TCP (TANDEM_TRANSPORT=tcp)",
               what, ::ucs_status_string(s));
}

}  // namespace

std::shared_ptr<Context> Context::create(int rank) {
  auto state = std::make_unique<State>();
  ucp_config_t* config = nullptr;
  ucs_status_t s = ::ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) fail("read its configuration", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  s = ::ucp_init(&params, config, &state->context);
  ::ucp_config_release(config);
  if (s != UCS_OK) fail("start", s);
  std::shared_ptr<Context> ctx(new Context(rank, std::move(state)));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // one thread at a time: the mesh's waiter
  s = ::ucp_worker_create(ctx->state_->context, &wp, &ctx->state_->worker);
  if (s != UCS_OK) fail("create a worker", s);
  s = ::ucp_worker_get_efd(ctx->state_->worker, &ctx->state_->efd);
  if (s != UCS_OK) fail("give its worker's event fd", s);
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  s = ::ucp_worker_get_address(ctx->state_->worker, &address, &length);
  if (s != UCS_OK) fail("give its worker's address", s);
  ctx->address_.assign(reinterpret_cast<const char*>(address), length);
  ::ucp_worker_release_address(ctx->state_->worker, address);
  if (ctx->address_.size() > kMaxAddressBytes)
    fail("give a worker address of a bounded size", UCS_ERR_EXCEEDS_LIMIT);
  return ctx;
}

Context::~Context() {
  if (state_->worker != nullptr) ::ucp_worker_destroy(state_->worker);
  if (state_->context != nullptr) ::ucp_cleanup(state_->context);
}

std::unique_ptr<transport::Endpoint> Context::make_endpoint(int peer,
                                                            const std::string& peer_address,
                                                            PeerFailureHandler& failures) {
  return std::make_unique<Endpoint>(peer, failures, shared_from_this(), peer_address);
}

std::string describe(const transport::Endpoint& ep) {
  const auto* u = dynamic_cast<const Endpoint*>(&ep);
  return u != nullptr && !u->lanes().empty() ? u->lanes() : std::string("UCX");
}

#else  // built without UCX

struct Context::State {};

bool available() noexcept {
  return false;
}

std::shared_ptr<Context> Context::create(int /*rank*/) {
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "TANDEM_TRANSPORT=ucx: this tandem was built without UCX; install libucx-dev and "
               "rebuild, or use TANDEM_TRANSPORT=tcp");
}

Context::~Context() = default;

std::unique_ptr<transport::Endpoint> Context::make_endpoint(int /*peer*/,
                                                            const std::string& /*peer_address*/,
                                                            PeerFailureHandler& /*failures*/) {
  TANDEM_THROW(ErrorCode::InvalidArgument, "this tandem was built without UCX");
}

std::string describe(const transport::Endpoint& /*ep*/) {
  return "UCX";
}

#endif

}  // namespace tandem::transport::ucx
