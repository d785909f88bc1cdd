#pragma once
// The tools' internal API (docs/architecture.md, "The tools' internal API"): the timeline
// files of TANDEM_TRACE. Not a public API: it changes with the tools that use it.

#include <cstddef>
#include <filesystem>

namespace tandem::tools_api {

/// Joins the parts "<file>.rank<N>.json" that the ranks wrote under TANDEM_TRACE=<file> into
/// `file` (atomically) and, when `remove_parts`, deletes them. Returns how many parts were
/// merged (0: none found, `file` untouched). Throws Error(Io) when a part cannot be read or
/// is not one that tandem wrote.
std::size_t merge_trace_parts(const std::filesystem::path& file, bool remove_parts);

}  // namespace tandem::tools_api
