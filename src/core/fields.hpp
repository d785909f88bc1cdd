#pragma once
// The number of fields of an aggregate, for static checks that code handling every field of a
// struct is told when a field is added (see the call memo in comm/communicator.cpp).

#include <cstddef>

namespace tandem::core {
namespace detail {

// Converts to any field's type; only named in unevaluated contexts.
struct AnyField {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor): the conversion is the point
};

}  // namespace detail

/// How many fields aggregate-initialising `T` takes: the number of its data members for an
/// aggregate without bases (members with default initialisers count too).
template <class T, class... Fields>
consteval std::size_t field_count() {
  if constexpr (requires { T{Fields{}..., detail::AnyField{}}; })
    return field_count<T, Fields..., detail::AnyField>();
  else
    return sizeof...(Fields);
}

}  // namespace tandem::core
