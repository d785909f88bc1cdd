#include "algorithms/model.hpp"

#include <bit>

namespace tandem::algorithms::model {
namespace {

int log2_floor(int n) noexcept {
  return std::bit_width(static_cast<unsigned>(n)) - 1;
}

int log2_ceil(int n) noexcept {
  return n <= 1 ? 0 : std::bit_width(static_cast<unsigned>(n - 1));
}

}  // namespace

double ring_allreduce(int n, double bytes, const LinkCost& c) noexcept {
  if (n <= 1) return 0;
  const double steps = 2.0 * (n - 1);
  return steps * c.alpha + steps / n * bytes * c.beta;
}

double rabenseifner_allreduce(int n, double bytes, const LinkCost& c) noexcept {
  if (n <= 1) return 0;
  const int p = 1 << log2_floor(n);
  double t = 2.0 * log2_floor(n) * c.alpha + 2.0 * (p - 1) / p * bytes * c.beta +
             static_cast<double>(p - 1) / p * bytes * c.gamma;
  if (p != n) t += 2.0 * c.alpha + 2.0 * bytes * c.beta + bytes * c.gamma;
  return t;
}

double tree_allreduce(int n, double bytes, const LinkCost& c) noexcept {
  const int steps = log2_ceil(n);
  return 2.0 * steps * (c.alpha + bytes * c.beta) + steps * bytes * c.gamma;
}

bool prefer_log_steps(int n, std::size_t bytes, const LinkCost& c) noexcept {
  const auto at = static_cast<double>(bytes == 0 ? 0 : std::bit_floor(bytes));
  return rabenseifner_allreduce(n, at, c) < ring_allreduce(n, at, c);
}

bool prefer_tree_between_hosts(int hosts, std::size_t bytes, const LinkCost& c) noexcept {
  const auto b = static_cast<double>(bytes);
  return tree_allreduce(hosts, b, c) < ring_allreduce(hosts, b, c);
}

}  // namespace tandem::algorithms::model
