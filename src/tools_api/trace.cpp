#include "tools_api/trace.hpp"

#include "core/trace.hpp"

namespace tandem::tools_api {

std::size_t merge_trace_parts(const std::filesystem::path& file, bool remove_parts) {
  return core::trace::merge_parts(file, remove_parts);
}

}  // namespace tandem::tools_api
