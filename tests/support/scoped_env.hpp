#pragma once
// An environment variable set (or unset) for the lifetime of a scope, restored afterwards even
// when an assertion returns early or throws.

#include <cstdlib>
#include <optional>
#include <string>

namespace tandem::testing {

class ScopedEnv {
 public:
  /// Sets `name` to `value`; a null `value` unsets it.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace tandem::testing
