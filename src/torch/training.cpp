// Training-loop pieces around DDP: the GradScaler with a found-inf decision shared by every
// rank, the prefetching image loader, and metrics reduced across ranks.

#include "torch/tensor_util.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/torch.hpp>

#include <cmath>

namespace tandem::torch {

// ---- GradScaler ---------------------------------------------------------------------------

GradScaler::GradScaler(std::shared_ptr<Communicator> comm, GradScalerOptions options)
    : comm_(std::move(comm)), options_(options) {
  TANDEM_CHECK_ARG(comm_ != nullptr, "GradScaler: no communicator");
  TANDEM_CHECK_ARG(std::isfinite(options_.init_scale) && options_.init_scale > 0,
                   "GradScaler: init_scale must be positive and finite, got {}",
                   options_.init_scale);
  TANDEM_CHECK_ARG(options_.growth_factor > 1.0,
                   "GradScaler: growth_factor must be greater than 1, got {}",
                   options_.growth_factor);
  TANDEM_CHECK_ARG(options_.backoff_factor > 0.0 && options_.backoff_factor < 1.0,
                   "GradScaler: backoff_factor must be in (0, 1), got {}", options_.backoff_factor);
  TANDEM_CHECK_ARG(options_.growth_interval > 0,
                   "GradScaler: growth_interval must be positive, got {}",
                   options_.growth_interval);
  state_.scale = options_.enabled ? options_.init_scale : 1.0;
}

::torch::Tensor GradScaler::scale(const ::torch::Tensor& loss) const {
  if (!options_.enabled) return loss;
  return loss * state_.scale;
}

void GradScaler::unscale(::torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  TANDEM_CHECK_ARG(!unscaled_,
                   "GradScaler::unscale: already called since the last update(); call it at most "
                   "once per step, before step() and update()");
  ::torch::NoGradGuard no_grad;
  const double inv = 1.0 / state_.scale;
  // One flag per gradient on its device, read once: a read per gradient would stall a GPU
  // step once per parameter.
  std::vector<::torch::Tensor> finite;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      auto& g = p.mutable_grad();
      if (!g.defined()) continue;
      g.mul_(inv);
      auto ok = ::torch::isfinite(g).all();
      finite.push_back(finite.empty() ? ok : ok.to(finite.front().device()));
    }
  }
  const bool local_inf = !finite.empty() && !::torch::stack(finite).all().item<bool>();
  // Every rank must skip the same steps, or the replicas drift apart.
  float flag = local_inf ? 1.0f : 0.0f;
  comm_->allreduce(BufferView::raw(&flag, 1, DataType::f32), ReduceOp::max);
  found_inf_ = flag > 0.0f;
  unscaled_ = true;
  if (found_inf_)
    TANDEM_DETAIL(ddp, "GradScaler: non-finite gradient {}; skipping the step at scale {}",
                  local_inf ? "on this rank" : "on another rank", state_.scale);
}

bool GradScaler::step(::torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (!unscaled_) unscale(optimizer);
  if (found_inf_) {
    ++skipped_;
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  TANDEM_CHECK_ARG(unscaled_,
                   "GradScaler::update: no gradients were checked since the last update(); call "
                   "step() (or unscale()) before update()");
  if (found_inf_) {
    state_.scale *= options_.backoff_factor;
    state_.growth_tracker = 0;
  } else if (++state_.growth_tracker >= options_.growth_interval) {
    const double grown = state_.scale * options_.growth_factor;
    if (std::isfinite(grown)) state_.scale = grown;
    state_.growth_tracker = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

double GradScaler::get_scale() const noexcept {
  return options_.enabled ? state_.scale : 1.0;
}
std::int64_t GradScaler::skipped_steps() const noexcept {
  return skipped_;
}
GradScalerState GradScaler::state() const noexcept {
  return state_;
}

void GradScaler::load_state(const GradScalerState& state) {
  TANDEM_CHECK_ARG(std::isfinite(state.scale) && state.scale > 0,
                   "GradScaler::load_state: scale must be positive and finite, got {}",
                   state.scale);
  TANDEM_CHECK_ARG(state.growth_tracker >= 0, "GradScaler::load_state: negative growth_tracker {}",
                   state.growth_tracker);
  state_ = state;
  unscaled_ = false;
  found_inf_ = false;
}

// ---- ImageLoader --------------------------------------------------------------------------

namespace {

std::size_t count_batches(std::size_t samples, std::size_t batch_size, bool drop_last) {
  TANDEM_CHECK_ARG(batch_size > 0, "ImageLoader: batch_size must be positive");
  return drop_last ? samples / batch_size : (samples + batch_size - 1) / batch_size;
}

}  // namespace

ImageLoader::ImageLoader(const data::ImageDataset& dataset, const data::DistributedSampler& sampler,
                         std::size_t batch_size, bool drop_last, data::Normalize normalize,
                         data::LoaderOptions options)
    : indices_(std::make_shared<const std::vector<std::size_t>>(sampler.remaining())),
      num_batches_(count_batches(indices_->size(), batch_size, drop_last)),
      loader_(
          num_batches_,
          [&dataset, indices = indices_, batch_size, normalize](std::size_t k) {
            const std::size_t begin = k * batch_size;
            const std::size_t n = std::min(batch_size, indices->size() - begin);
            const auto rows = static_cast<std::int64_t>(dataset.rows);
            const auto cols = static_cast<std::int64_t>(dataset.cols);
            ImageBatch b;
            b.images = ::torch::empty({static_cast<std::int64_t>(n), 1, rows, cols},
                                      ::torch::TensorOptions().dtype(::torch::kFloat32));
            b.labels = ::torch::empty({static_cast<std::int64_t>(n)},
                                      ::torch::TensorOptions().dtype(::torch::kInt64));
            data::fill_batch(
                dataset, std::span<const std::size_t>(indices->data() + begin, n),
                std::span<float>(b.images.data_ptr<float>(), n * dataset.image_pixels()),
                std::span<std::int64_t>(b.labels.data_ptr<std::int64_t>(), n), normalize);
            return b;
          },
          options) {}

std::optional<ImageBatch> ImageLoader::next() {
  return loader_.next();
}

std::size_t ImageLoader::size() const noexcept {
  return num_batches_;
}

// ---- metrics ------------------------------------------------------------------------------

void all_sum(Communicator& comm, std::span<double> values) {
  if (values.empty()) return;
  comm.allreduce(BufferView::of(values), ReduceOp::sum);
}

double all_average(Communicator& comm, double value) {
  comm.allreduce(BufferView::raw(&value, 1, DataType::f64), ReduceOp::avg);
  return value;
}

}  // namespace tandem::torch
