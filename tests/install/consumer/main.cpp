// A program built against an installed tandem: a one-rank group over an in-process store.
#include <tandem/communicator.hpp>

#include <cstdio>
#include <memory>
#include <vector>

int main() {
  auto store = std::make_shared<tandem::store::HashStore>();
  auto comm = tandem::Communicator::create(store, 0, 1);
  std::vector<float> v{1.0f, 2.0f, 3.0f};
  comm->allreduce(tandem::BufferView::of(std::span<float>(v)), tandem::ReduceOp::sum);
  if (v[0] != 1.0f || v[2] != 3.0f || comm->size() != 1) {
    std::puts("consumer: wrong result");
    return 1;
  }
  std::puts("consumer: ok");
  return 0;
}
