// Bucket assignment and layout, the cross-rank check of the parameter list, and the one
// rebuild in rank 0's gradient-ready order.

#include "ddp/reducer_impl.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace tandem::ddp {

std::vector<std::vector<std::size_t>> compute_bucket_assignment_by_size(
    std::span<const BufferView> gradients, std::span<const std::size_t> order,
    std::size_t first_bucket_bytes, std::size_t bucket_cap_bytes) {
  const std::size_t n = gradients.size();
  TANDEM_CHECK_ARG(order.size() == n,
                   "compute_bucket_assignment_by_size: order lists {} parameters, expected {}",
                   order.size(), n);
  std::vector<std::uint8_t> seen(n, 0);
  for (std::size_t i : order) {
    TANDEM_CHECK_ARG(i < n && !seen[i],
                     "compute_bucket_assignment_by_size: order is not a permutation of the {} "
                     "parameters (index {} out of range or repeated)",
                     n, i);
    seen[i] = 1;
  }

  struct Open {
    std::vector<std::size_t> params;
    std::size_t bytes = 0;
    std::size_t closed = 0;  // buckets of this dtype closed so far (picks the cap)
  };
  std::array<Open, std::size(kAllDataTypes)> open{};
  std::vector<std::pair<std::size_t, std::vector<std::size_t>>> done;  // (last position, params)
  for (std::size_t pos = 0; pos < n; ++pos) {
    const std::size_t i = order[pos];
    Open& o = open[static_cast<std::size_t>(gradients[i].dtype)];
    o.params.push_back(i);
    o.bytes += gradients[i].bytes();
    const std::size_t cap = o.closed == 0 ? first_bucket_bytes : bucket_cap_bytes;
    if (o.bytes >= cap) {
      done.emplace_back(pos, std::move(o.params));
      o.params.clear();
      o.bytes = 0;
      ++o.closed;
    }
  }
  std::vector<std::size_t> position(n);
  for (std::size_t pos = 0; pos < n; ++pos) position[order[pos]] = pos;
  for (Open& o : open)
    if (!o.params.empty()) done.emplace_back(position[o.params.back()], std::move(o.params));
  // In the order buckets complete when gradients arrive in `order`: launches go in bucket
  // order, so a bucket listed before one that completes earlier would hold that one back.
  std::sort(done.begin(), done.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<std::size_t>> result;
  result.reserve(done.size());
  for (auto& d : done) result.push_back(std::move(d.second));
  return result;
}

void Reducer::Impl::build_buckets(const std::vector<std::vector<std::size_t>>& assignment) {
  buckets.clear();
  buckets.reserve(assignment.size());
  bucket_of.assign(grads.size(), 0);
  slot_of.assign(grads.size(), 0);
  for (std::size_t b = 0; b < assignment.size(); ++b) {
    Bucket k;
    k.dtype = grads[assignment[b].front()].dtype;
    for (std::size_t j = 0; j < assignment[b].size(); ++j) {
      const std::size_t i = assignment[b][j];
      k.params.push_back(i);
      k.offsets.push_back(k.count);
      k.count += grads[i].count;
      bucket_of[i] = b;
      slot_of[i] = j;
    }
    k.device = options.memory ? options.memory->device() : Device::cpu();
    k.buffer = allocate(k.count * dtype_size(k.dtype));
    k.pending = k.params.size();
    buckets.push_back(std::move(k));
  }
}

void Reducer::Impl::verify_across_ranks() const {
  const int world = comm->size();
  if (world == 1) return;
  // (parameters, elements, FNV-1a over every (dtype, count)) per rank.
  std::uint64_t hash = 0xcbf29ce484222325ull;
  std::uint64_t elements = 0;
  auto mix = [&hash](std::uint64_t v) {
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (v >> (8 * byte)) & 0xffu;
      hash *= 0x100000001b3ull;
    }
  };
  for (const BufferView& g : grads) {
    mix(static_cast<std::uint64_t>(g.dtype));
    mix(g.count);
    elements += g.count;
  }
  std::array<std::int64_t, 3> mine{static_cast<std::int64_t>(grads.size()),
                                   static_cast<std::int64_t>(elements),
                                   static_cast<std::int64_t>(hash)};
  std::vector<std::int64_t> all(3 * static_cast<std::size_t>(world));
  comm->allgather(BufferView::of(std::span<std::int64_t>(mine)),
                  BufferView::of(std::span<std::int64_t>(all)));
  std::vector<std::string> differ;
  for (int r = 1; r < world; ++r) {
    const auto* row = &all[3 * static_cast<std::size_t>(r)];
    if (row[0] != all[0] || row[1] != all[1] || row[2] != all[2])
      differ.push_back(fmt::format("rank {} has {} parameters of {} elements", r, row[0], row[1]));
  }
  if (!differ.empty())
    TANDEM_THROW(ErrorCode::Mismatch,
                 "Reducer: ranks registered different parameters: rank 0 has {} parameters of {} "
                 "elements; {} (or the same counts with other dtypes or sizes). Every rank must "
                 "build the same model and register its parameters in the same order",
                 all[0], all[1], fmt::join(differ, "; "));
}

void Reducer::Impl::verify_pass() const {
  const int world = comm->size();
  if (world == 1) return;
  // (Which parameters were unused may differ between ranks: data-dependent control flow.)
  auto fnv = [](std::uint64_t h, const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
  };
  std::uint64_t layout = 0xcbf29ce484222325ull, grads_sum = layout;
  for (const Bucket& b : buckets) {
    layout = fnv(layout, &b.dtype, sizeof b.dtype);
    layout = fnv(layout, b.params.data(), b.params.size() * sizeof(std::size_t));
    const std::size_t bytes = b.count * dtype_size(b.dtype);
    if (options.memory) {
      std::vector<std::byte> host(bytes);
      options.memory->read(host.data(), b.buffer.data(), bytes);
      grads_sum = fnv(grads_sum, host.data(), bytes);
    } else {
      grads_sum = fnv(grads_sum, b.buffer.data(), bytes);
    }
  }
  std::array<std::int64_t, 3> mine{static_cast<std::int64_t>(sync_passes),
                                   static_cast<std::int64_t>(layout),
                                   static_cast<std::int64_t>(grads_sum)};
  std::vector<std::int64_t> all(3 * static_cast<std::size_t>(world));
  comm->allgather(BufferView::of(std::span<std::int64_t>(mine)),
                  BufferView::of(std::span<std::int64_t>(all)));
  static constexpr std::array<const char*, 3> kWhat = {
      "the number of synchronised passes", "the bucket layout", "the averaged gradients"};
  std::vector<std::string> differ;
  for (int r = 1; r < world; ++r)
    for (std::size_t k = 0; k < kWhat.size(); ++k)
      if (all[3 * static_cast<std::size_t>(r) + k] != all[k])
        differ.push_back(fmt::format("rank {}: {}", r, kWhat[k]));
  if (!differ.empty())
    TANDEM_THROW(ErrorCode::Mismatch,
                 "DDP check after pass {} (TANDEM_DEBUG=DETAIL): ranks differ from rank 0 in "
                 "{}. The replicas are no longer identical: check that every rank runs the same "
                 "model and backward passes, and that a custom communication hook leaves the "
                 "same average on every rank",
                 sync_passes, fmt::join(differ, ", "));
  TANDEM_DETAIL(ddp, "DDP check after pass {}: {} ranks agree (bucket layout, gradients)",
                sync_passes, world);
}

void Reducer::Impl::rebuild() {
  const std::size_t n = grads.size();
  std::vector<std::int64_t> wire(n, -1);
  if (comm->rank() == 0) {
    // Rank 0's ready order; parameters it never saw (unused) follow in their bucket order.
    std::vector<std::uint8_t> listed(n, 0);
    std::size_t k = 0;
    for (std::size_t i : order) {
      wire[k++] = static_cast<std::int64_t>(i);
      listed[i] = 1;
    }
    for (const Bucket& b : buckets)
      for (std::size_t i : b.params)
        if (!listed[i]) wire[k++] = static_cast<std::int64_t>(i);
  }
  comm->broadcast(BufferView::of(std::span<std::int64_t>(wire)), 0);

  std::vector<std::size_t> new_order(n);
  std::vector<std::uint8_t> seen(n, 0);
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t i = wire[k];
    if (i < 0 || static_cast<std::size_t>(i) >= n || seen[static_cast<std::size_t>(i)])
      TANDEM_THROW(ErrorCode::Mismatch,
                   "Reducer: the gradient-ready order broadcast by rank 0 is not a permutation "
                   "of this rank's {} parameters (entry {} is {}): ranks registered different "
                   "parameters",
                   n, k, i);
    seen[static_cast<std::size_t>(i)] = 1;
    new_order[k] = static_cast<std::size_t>(i);
  }

  std::vector<Bucket> old = std::move(buckets);
  const std::vector<std::size_t> old_bucket_of = bucket_of;
  const std::vector<std::size_t> old_slot_of = slot_of;
  build_buckets(compute_bucket_assignment_by_size(grads, new_order, options.first_bucket_bytes,
                                                  options.bucket_cap_bytes));
  for (std::size_t i = 0; i < n; ++i) {
    const Bucket& ob = old[old_bucket_of[i]];
    const BufferView old_slot = ob.view().slice(ob.offsets[old_slot_of[i]], grads[i].count);
    if (grads[i].data != old_slot.data) continue;
    // The gradient lives in its slot (bucket view): move it with its content.
    const BufferView new_slot = slot(i);
    if (new_slot.count > 0) copy(new_slot.data, old_slot.data, new_slot.bytes());
    grads[i] = new_slot;
  }
  for (Bucket& b : old) retired.push_back(std::move(b.buffer));
  rebuilt = true;
  ++generation;
  TANDEM_INFO(ddp, "buckets rebuilt in rank 0's gradient-ready order: {}", describe_buckets());
}

namespace {

std::string format_bytes(std::size_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (std::size_t{1} << 20))
    return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024);
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

std::string Reducer::Impl::describe_buckets() const {
  std::string out = fmt::format("{} bucket{} (hook {})", buckets.size(),
                                buckets.size() == 1 ? "" : "s", hook ? hook->name() : "none");
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const Bucket& k = buckets[b];
    std::string params;
    if (k.params.size() <= 12) {
      params = fmt::format("{}", fmt::join(k.params, ","));
    } else {
      params = fmt::format("{},...,{} ({})", fmt::join(k.params.begin(), k.params.begin() + 6, ","),
                           k.params.back(), k.params.size());
    }
    out += fmt::format("; #{} {} x {} ({}) params [{}]", b, to_string(k.dtype), k.count,
                       format_bytes(k.count * dtype_size(k.dtype)), params);
  }
  return out;
}

}  // namespace tandem::ddp
