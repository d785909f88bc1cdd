#pragma once
// Running the tools as subprocesses from tests: stdout and stderr captured through pipes,
// every wait bounded by a deadline (the process is SIGKILLed there), nothing sleeps.

#include "support/temp_dir.hpp"

#include <tandem/types.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace tandem::testing {

struct ProcessResult {
  int exit_code = -1;      ///< when it exited normally
  int signal = 0;          ///< terminating signal otherwise
  bool timed_out = false;  ///< still running at the deadline (then killed)
  double seconds = 0;      ///< from start to exit
  std::string out, err;
};

class Subprocess {
 public:
  /// Starts argv[0] (a path) with the test's environment plus `env` ("NAME=value"). The child
  /// leads its own process group, as a job started by a shell does.
  explicit Subprocess(const std::vector<std::string>& argv,
                      const std::vector<std::string>& env = {});
  ~Subprocess();  ///< kills the process (and its group) if it still runs
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const noexcept { return pid_; }
  /// Reads output until `done(out, err)` holds (true) or the deadline passes (false).
  bool wait_for(const std::function<bool(const std::string&, const std::string&)>& done,
                std::chrono::milliseconds timeout);
  /// Reads output to the end and reaps the process; kills it at the deadline.
  ProcessResult wait(std::chrono::milliseconds timeout);
  const std::string& out() const noexcept { return result_.out; }
  const std::string& err() const noexcept { return result_.err; }

 private:
  bool pump(Deadline deadline);  ///< one poll round; false at the deadline
  void reap(bool block);

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1, pid_fd_ = -1;
  bool exited_ = false;
  Clock::time_point start_ = Clock::now();
  ProcessResult result_;
};

/// Starts, waits (bounded) and returns everything.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::vector<std::string>& env = {},
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// Splits text into lines (without the newlines; a last line without one is kept).
std::vector<std::string> split_lines(const std::string& text);

/// tandemrun's failure summary in `err`: from its first rule of '=' to the next (empty if
/// there is none).
std::string failure_summary(const std::string& err);

/// True when no process with this pid exists any more (a zombie counts as gone).
bool process_gone(pid_t pid);

/// A port of 127.0.0.1 held busy (bound and listening) while the object lives.
class BusyPort {
 public:
  BusyPort();  ///< throws std::runtime_error when no socket can be bound
  ~BusyPort();
  BusyPort(const BusyPort&) = delete;
  BusyPort& operator=(const BusyPort&) = delete;
  int port() const noexcept { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

/// Paths of the binaries under test.
std::string tandemrun_path();
std::string tandem_perf_path();

}  // namespace tandem::testing
