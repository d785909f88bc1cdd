// DistributedDataParallel for LibTorch: autograd hooks on every parameter's gradient
// accumulator drive the framework-agnostic Reducer, and a final engine callback finishes the
// reduction before backward() returns.

#include "torch/tensor_util.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/torch.hpp>

#include <fmt/ranges.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <mutex>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace tandem::torch {

namespace {

using ::torch::autograd::Node;
// How autograd hands out a parameter's gradient accumulator: a shared_ptr up to torch 2.12,
// an intrusive_ptr from 2.13.
using NodePtr = decltype(::torch::autograd::impl::grad_accumulator(std::declval<at::Tensor>()));

struct NamedTensor {
  std::string name;
  ::torch::Tensor tensor;
};

std::vector<NamedTensor> module_tensors(::torch::nn::Module& module, bool parameters,
                                        bool buffers) {
  std::vector<NamedTensor> out;
  if (parameters)
    for (auto& p : module.named_parameters(true)) out.push_back({p.key(), p.value()});
  if (buffers)
    for (auto& b : module.named_buffers(true)) out.push_back({b.key(), b.value()});
  return out;
}

// Bucket memory as torch tensors of bytes on one device; copies run on torch's current stream
// of the calling thread (autograd's stream for the gradient in a hook, the caller's stream at
// the end of backward).
class TorchBucketMemory final : public ddp::BucketMemory {
 public:
  explicit TorchBucketMemory(c10::Device device)
      : device_(device), tandem_device_(detail::to_device(device)) {}

  Device device() const noexcept override { return tandem_device_; }

  std::shared_ptr<void> allocate(std::size_t bytes) override {
    auto t = ::torch::zeros({static_cast<std::int64_t>(std::max<std::size_t>(bytes, 1))},
                            ::torch::TensorOptions().dtype(::torch::kUInt8).device(device_));
    void* data = t.data_ptr();
    return {data, [t = std::move(t)](void*) mutable { t.reset(); }};
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    ::torch::NoGradGuard no_grad;
    bytes_at(dst, bytes).copy_(bytes_at(const_cast<void*>(src), bytes));
  }
  void zero(void* dst, std::size_t bytes) override {
    ::torch::NoGradGuard no_grad;
    bytes_at(dst, bytes).zero_();
  }
  void read(void* host, const void* src, std::size_t bytes) override {
    ::torch::NoGradGuard no_grad;
    ::torch::from_blob(host, {static_cast<std::int64_t>(bytes)}, ::torch::kUInt8)
        .copy_(bytes_at(const_cast<void*>(src), bytes));
  }
  void* stream() override { return detail::current_stream(device_); }

 private:
  ::torch::Tensor bytes_at(void* p, std::size_t bytes) const {
    return ::torch::from_blob(p, {static_cast<std::int64_t>(bytes)},
                              ::torch::TensorOptions().dtype(::torch::kUInt8).device(device_));
  }
  c10::Device device_;
  Device tandem_device_;
};

// Broadcasts tensors from root, one collective per device and dtype over a flat copy: a model
// has many small tensors, and each collective costs a round trip.
void broadcast_tensors(Communicator& comm, const std::vector<NamedTensor>& tensors, int root) {
  if (comm.size() == 1 || tensors.empty()) return;
  ::torch::NoGradGuard no_grad;
  std::map<std::pair<std::string, c10::ScalarType>, std::vector<const NamedTensor*>> groups;
  for (const auto& t : tensors)
    groups[{t.tensor.device().str(), t.tensor.scalar_type()}].push_back(&t);
  for (auto& [key, group] : groups) {
    std::int64_t total = 0;
    for (const auto* t : group) total += t->tensor.numel();
    if (total == 0) continue;
    const c10::Device device = group.front()->tensor.device();
    auto flat = ::torch::empty({total}, ::torch::TensorOptions().dtype(key.second).device(device));
    std::int64_t offset = 0;
    if (comm.rank() == root) {
      for (const auto* t : group) {
        const auto n = t->tensor.numel();
        flat.narrow(0, offset, n).copy_(t->tensor.reshape({n}));
        offset += n;
      }
    }
    CallOptions o;
    o.stream = detail::current_stream(device);
    comm.broadcast(detail::view_of(flat), root, o);
    if (comm.rank() == root) continue;
    offset = 0;
    for (const auto* t : group) {
      const auto n = t->tensor.numel();
      t->tensor.copy_(flat.narrow(0, offset, n).view(t->tensor.sizes()));
      offset += n;
    }
  }
}

std::uint64_t fnv1a(std::uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Every rank must wrap the same architecture: names, shapes, dtypes and requires_grad of every
// parameter and buffer. One small allgather; a difference names the ranks.
void verify_same_module(Communicator& comm, const std::vector<NamedTensor>& params,
                        const std::vector<NamedTensor>& buffers) {
  if (comm.size() == 1) return;
  std::uint64_t h = 0xcbf29ce484222325ull;
  std::int64_t elements = 0;
  for (const auto* list : {&params, &buffers}) {
    for (const auto& t : *list) {
      h = fnv1a(h, t.name);
      h = fnv1a(h, detail::describe(t.tensor));
      h = fnv1a(h, t.tensor.requires_grad() ? "g" : "-");
      elements += t.tensor.numel();
    }
    h = fnv1a(h, "|");
  }
  std::array<std::int64_t, 4> mine{static_cast<std::int64_t>(h),
                                   static_cast<std::int64_t>(params.size()),
                                   static_cast<std::int64_t>(buffers.size()), elements};
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.allgather(BufferView::of(std::span<std::int64_t>(mine)),
                 BufferView::of(std::span<std::int64_t>(all)));
  std::string differ;
  for (int r = 1; r < comm.size(); ++r) {
    const auto* x = &all[static_cast<std::size_t>(r) * mine.size()];
    if (x[0] == all[0]) continue;
    differ += fmt::format("{}rank {} ({} parameters, {} buffers, {} elements)",
                          differ.empty() ? "" : "; ", r, x[1], x[2], x[3]);
  }
  if (!differ.empty())
    TANDEM_THROW(ErrorCode::Mismatch,
                 "DistributedDataParallel: the module differs from rank 0's ({} parameters, {} "
                 "buffers, {} elements) on {}: parameter or buffer names, shapes, dtypes or "
                 "requires_grad differ. Every rank must build the same model before wrapping it",
                 all[1], all[2], all[3], differ);
}

std::unique_ptr<ddp::CommHook> make_hook(const std::string& name) {
  if (name == "allreduce") return ddp::allreduce_hook();
  if (name == "fp16_compress") return ddp::fp16_compress_hook();
  if (name == "bf16_compress") return ddp::bf16_compress_hook();
  TANDEM_THROW(ErrorCode::InvalidArgument,
               "DistributedDataParallel: unknown comm_hook '{}'; valid: allreduce, "
               "fp16_compress, bf16_compress",
               name);
}

}  // namespace

std::shared_ptr<ddp::BucketMemory> bucket_memory(c10::Device device) {
  return std::make_shared<TorchBucketMemory>(device);
}

void broadcast_module(Communicator& comm, ::torch::nn::Module& module, int root) {
  TANDEM_CHECK_ARG(root >= 0 && root < comm.size(), "broadcast_module: root {} is not a rank of {}",
                   root, comm.size());
  const auto tensors = module_tensors(module, true, true);
  for (const auto& t : tensors) detail::check_tensor(t.tensor, "tensor", t.name, false);
  broadcast_tensors(comm, tensors, root);
}

// ---- DistributedDataParallel ------------------------------------------------------------------

struct DistributedDataParallel::Impl {
  std::shared_ptr<::torch::nn::Module> module;
  std::shared_ptr<Communicator> comm;
  DdpOptions options;
  /// The parameters that require grad, in module->parameters() order: Reducer index i.
  std::vector<::torch::Tensor> params;
  std::vector<std::string> names;
  std::unique_ptr<ddp::Reducer> reducer;
  /// Kept alive so that every graph built from a parameter uses this node, and its hook.
  std::vector<NodePtr> accumulators;
  std::vector<std::uintptr_t> hook_keys;
  std::unordered_map<const Node*, std::size_t> index_of;

  std::mutex mutex;  // the pass state below: hooks may run on autograd's threads
  bool pass_open = false;
  bool pass_sync = true;
  std::vector<std::uint8_t> marked;
  /// Parameters the outputs of the forward passes since the last backward can reach.
  std::optional<std::vector<std::uint8_t>> reachable;
  std::uint64_t viewed_generation = std::numeric_limits<std::uint64_t>::max();

  void hook(std::size_t i, NodePtr acc);
  void rehook_replaced_accumulators();
  void on_gradient(std::size_t i);
  void begin_pass();
  void end_pass();
  void recover_abandoned_pass();
  void point_grads_at_buckets();
  ::torch::Tensor& zero_grad_if_undefined(std::size_t i);
  /// Tells the Reducer where parameter i's gradient lives now (made contiguous; allocated as
  /// zeros when undefined and `allocate`).
  void refresh_gradient(std::size_t i, bool allocate);
};

::torch::Tensor& DistributedDataParallel::Impl::zero_grad_if_undefined(std::size_t i) {
  auto& g = params[i].mutable_grad();
  if (!g.defined()) g = ::torch::zeros_like(params[i]);
  return g;
}

void DistributedDataParallel::Impl::refresh_gradient(std::size_t i, bool allocate) {
  auto& g = params[i].mutable_grad();
  if (!g.defined() && allocate) g = ::torch::zeros_like(params[i]);
  if (!g.defined() || g.numel() == 0) return;
  if (!g.is_contiguous()) g = g.contiguous();
  reducer->set_gradient(i, detail::view_of(g));
}

void DistributedDataParallel::Impl::hook(std::size_t i, NodePtr acc) {
  TANDEM_CHECK(acc != nullptr, "parameter '{}' has no gradient accumulator", names[i]);
  Impl* self = this;
  const auto key = acc->add_post_hook(std::make_unique<::torch::autograd::utils::LambdaPostHook>(
      [self, i](const ::torch::autograd::variable_list& outputs,
                const ::torch::autograd::variable_list&) {
        self->on_gradient(i);
        return outputs;
      }));
  if (i < accumulators.size()) {
    accumulators[i]->del_post_hook(hook_keys[i]);
    index_of.erase(accumulators[i].get());
    accumulators[i] = acc;
    hook_keys[i] = key;
  } else {
    accumulators.push_back(acc);
    hook_keys.push_back(key);
  }
  index_of[acc.get()] = i;
}

// Autograd drops a parameter's accumulator when its data is replaced in some ways (set_data
// with another dtype or device, Module::load's set_): the next graph then gets a fresh node
// without our hook, and its gradient would never be reduced.
void DistributedDataParallel::Impl::rehook_replaced_accumulators() {
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto acc = ::torch::autograd::impl::grad_accumulator(params[i]);
    if (acc.get() == accumulators[i].get()) continue;
    TANDEM_DETAIL(ddp,
                  "DistributedDataParallel: parameter '{}' has a new gradient accumulator; "
                  "hooking it",
                  names[i]);
    hook(i, std::move(acc));
  }
}

void DistributedDataParallel::Impl::point_grads_at_buckets() {
  ::torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const BufferView slot = reducer->bucket_view(i);
    auto& g = params[i].mutable_grad();
    if (slot.count == 0 || (g.defined() && g.data_ptr() == slot.data)) continue;
    auto view = ::torch::from_blob(
        slot.data, params[i].sizes(),
        ::torch::TensorOptions().dtype(params[i].scalar_type()).device(params[i].device()));
    if (g.defined()) {
      view.copy_(g);
    } else {
      view.zero_();  // set to none means "start from zero"
    }
    g = view;
  }
  viewed_generation = reducer->bucket_generation();
}

void DistributedDataParallel::Impl::begin_pass() {
  pass_open = true;
  pass_sync = reducer->require_sync();
  std::fill(marked.begin(), marked.end(), std::uint8_t{0});
  // Where every gradient lives now: the user may have replaced or reset them since the last
  // pass, and the Reducer must never read memory a freed gradient left behind.
  for (std::size_t i = 0; i < params.size(); ++i) refresh_gradient(i, false);
  std::vector<std::size_t> unused;
  if (reachable && options.reducer.find_unused_parameters) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      if ((*reachable)[i]) continue;
      unused.push_back(i);
      refresh_gradient(i, pass_sync);
    }
  }
  reachable.reset();
  reducer->prepare_for_backward(unused);
  ::torch::autograd::Engine::get_default_engine().queue_callback([this] { end_pass(); });
}

void DistributedDataParallel::Impl::on_gradient(std::size_t i) {
  std::lock_guard lock(mutex);
  if (!pass_open) begin_pass();
  marked[i] = 1;
  // An undefined incoming gradient counts as zero; a non-contiguous one (set by hand) is
  // replaced by a contiguous copy so that it can be reduced in place.
  auto& g = zero_grad_if_undefined(i);
  if (!g.is_contiguous()) g = g.contiguous();
  reducer->mark_variable_ready(i, detail::view_of(g));
}

void DistributedDataParallel::Impl::end_pass() {
  std::lock_guard lock(mutex);
  pass_open = false;
  // No gradient this pass (unused here, maybe used elsewhere): the average lands in a
  // zero-initialised gradient.
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!marked[i]) refresh_gradient(i, pass_sync && options.reducer.find_unused_parameters);
  reducer->finalize_backward();
  if (options.reducer.gradient_as_bucket_view && reducer->bucket_generation() != viewed_generation)
    point_grads_at_buckets();
}

void DistributedDataParallel::Impl::recover_abandoned_pass() {
  std::lock_guard lock(mutex);
  if (!pass_open) return;
  // The previous backward failed before its end (an exception inside backward skips the final
  // callback): reset the Reducer so this pass starts clean.
  pass_open = false;
  TANDEM_WARN(ddp,
              "DistributedDataParallel: the previous backward pass did not finish (it threw); "
              "resetting the reducer. If a collective failed, every rank must rebuild its "
              "communicator and DistributedDataParallel");
  try {
    reducer->finalize_backward();
  } catch (const std::exception& e) {
    TANDEM_DETAIL(ddp, "DistributedDataParallel: reset after a failed pass: {}", e.what());
  }
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<::torch::nn::Module> module,
                                                 std::shared_ptr<Communicator> comm,
                                                 DdpOptions options)
    : impl_(std::make_unique<Impl>()) {
  TANDEM_CHECK_ARG(module != nullptr, "DistributedDataParallel: no module");
  TANDEM_CHECK_ARG(comm != nullptr, "DistributedDataParallel: no communicator");
  Impl& s = *impl_;
  s.module = std::move(module);
  s.comm = std::move(comm);
  s.options = std::move(options);
  auto hook = make_hook(s.options.comm_hook);

  const auto params = module_tensors(*s.module, true, false);
  const auto buffers = module_tensors(*s.module, false, true);
  for (const auto& p : params) detail::check_tensor(p.tensor, "parameter", p.name, true);
  for (const auto& b : buffers) detail::check_tensor(b.tensor, "buffer", b.name, false);
  const NamedTensor* first = !params.empty()    ? &params[0]
                             : !buffers.empty() ? &buffers[0]
                                                : nullptr;
  const c10::Device device = first ? first->tensor.device() : c10::Device(c10::kCPU);
  for (const auto* list : {&params, &buffers})
    for (const auto& t : *list)
      TANDEM_CHECK_ARG(t.tensor.device() == device,
                       "DistributedDataParallel: '{}' is on {} but '{}' on {}; move the whole "
                       "module to one device (module->to(device)) before wrapping it",
                       t.name, t.tensor.device().str(), first->name, device.str());
  if (!device.is_cpu()) {
    TANDEM_CHECK_ARG(s.options.comm_hook == "allreduce",
                     "DistributedDataParallel: comm_hook '{}' compresses on the host; the module "
                     "is on {}: use the allreduce hook (bf16 parameters halve the bytes instead)",
                     s.options.comm_hook, device.str());
    if (!s.options.reducer.memory) s.options.reducer.memory = bucket_memory(device);
  }
  verify_same_module(*s.comm, params, buffers);
  broadcast_module(*s.comm, *s.module, 0);

  std::vector<BufferView> grads;
  for (const auto& p : params) {
    if (!p.tensor.requires_grad()) continue;
    s.params.push_back(p.tensor);
    s.names.push_back(p.name);
    const auto& g = p.tensor.grad();
    if (g.defined() && g.is_contiguous() && g.numel() > 0) {
      grads.push_back(detail::view_of(g));
    } else {
      grads.push_back({nullptr, static_cast<std::size_t>(p.tensor.numel()),
                       *detail::to_dtype(p.tensor.scalar_type()),
                       detail::to_device(p.tensor.device())});
    }
  }
  s.reducer = std::make_unique<ddp::Reducer>(s.comm, std::move(grads), s.options.reducer);
  s.reducer->register_comm_hook(std::move(hook));
  s.marked.assign(s.params.size(), 0);

  for (std::size_t i = 0; i < s.params.size(); ++i)
    s.hook(i, ::torch::autograd::impl::grad_accumulator(s.params[i]));
  if (s.options.reducer.gradient_as_bucket_view) s.point_grads_at_buckets();
  TANDEM_INFO(ddp,
              "DistributedDataParallel over {} parameters ({} require grad) and {} buffers, "
              "comm hook {}, broadcast_buffers {}",
              params.size(), s.params.size(), buffers.size(), s.options.comm_hook,
              s.options.broadcast_buffers);
}

DistributedDataParallel::~DistributedDataParallel() {
  if (!impl_) return;
  Impl& s = *impl_;
  for (std::size_t i = 0; i < s.accumulators.size(); ++i)
    s.accumulators[i]->del_post_hook(s.hook_keys[i]);
  if (s.options.reducer.gradient_as_bucket_view) {
    // The gradients outlive the Reducer's buckets: give them memory of their own.
    ::torch::NoGradGuard no_grad;
    for (auto& p : s.params) {
      auto& g = p.mutable_grad();
      if (g.defined()) g = g.clone();
    }
  }
}

::torch::nn::Module& DistributedDataParallel::module() const noexcept {
  return *impl_->module;
}
const std::shared_ptr<::torch::nn::Module>& DistributedDataParallel::module_ptr() const noexcept {
  return impl_->module;
}
Communicator& DistributedDataParallel::communicator() const noexcept {
  return *impl_->comm;
}
ddp::Reducer& DistributedDataParallel::reducer() noexcept {
  return *impl_->reducer;
}
ddp::NoSyncGuard DistributedDataParallel::no_sync() noexcept {
  return impl_->reducer->no_sync();
}
ddp::ReducerStats DistributedDataParallel::stats() const {
  return impl_->reducer->stats();
}

void DistributedDataParallel::pre_forward() {
  Impl& s = *impl_;
  s.recover_abandoned_pass();
  {
    std::lock_guard lock(s.mutex);
    s.rehook_replaced_accumulators();
  }
  if (s.options.broadcast_buffers) {
    const auto buffers = module_tensors(*s.module, false, true);
    if (!buffers.empty()) broadcast_tensors(*s.comm, buffers, 0);
  }
  if (s.options.reducer.gradient_as_bucket_view) {
    std::lock_guard lock(s.mutex);
    s.point_grads_at_buckets();
  }
}

void DistributedDataParallel::post_forward(const std::vector<::torch::Tensor>& outputs) {
  Impl& s = *impl_;
  if (!s.options.reducer.find_unused_parameters || !::torch::GradMode::is_enabled()) return;
  // Walk the graph from the outputs: the accumulators it reaches are the parameters that
  // will get a gradient; the others are reduced as zeros at the start of backward.
  std::vector<Node*> stack;
  std::unordered_set<const Node*> seen;
  std::vector<std::uint8_t> reached(s.params.size(), 0);
  bool any = false;
  auto visit = [&](Node* n) {
    if (n == nullptr || !seen.insert(n).second) return;
    if (auto it = s.index_of.find(n); it != s.index_of.end()) reached[it->second] = 1;
    stack.push_back(n);
  };
  for (const auto& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    any = true;
    if (out.grad_fn()) {
      visit(out.grad_fn().get());
    } else {
      visit(::torch::autograd::impl::try_get_grad_accumulator(out).get());
    }
  }
  if (!any) return;  // nothing to backward from: this forward adds no knowledge
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& edge : n->next_edges()) visit(edge.function.get());
  }
  std::lock_guard lock(s.mutex);
  if (!s.reachable) {
    s.reachable = std::move(reached);
  } else {
    // Several forwards before one backward: a parameter any of them reaches may get a gradient.
    for (std::size_t i = 0; i < reached.size(); ++i) (*s.reachable)[i] |= reached[i];
  }
}

}  // namespace tandem::torch
