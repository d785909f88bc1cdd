#include "watcher.hpp"

#include "records.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <sys/eventfd.h>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace tandem::tools::tandemrun {
namespace {

using namespace std::chrono_literals;

constexpr auto kMinLostAfter = 5s;
constexpr int kLostIntervals = 5;

}  // namespace

Watcher::Watcher(std::unique_ptr<store::Store> store, Keys keys, int node, bool coordinator,
                 const std::map<int, std::string>& peers, std::chrono::milliseconds interval,
                 bool go_on)
    : store_(std::move(store)),
      keys_(std::move(keys)),
      node_(node),
      coordinator_(coordinator),
      go_on_(go_on),
      interval_(interval),
      lost_after_(std::max<std::chrono::milliseconds>(kMinLostAfter, interval * kLostIntervals)) {
  event_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!event_fd_)
    TANDEM_THROW(ErrorCode::Io, "eventfd failed: {}", std::system_category().message(errno));
  apply_peers(peers);
  thread_ = std::thread([this] { loop(); });
}

Watcher::~Watcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::vector<WatchEvent> Watcher::take() {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(event_fd_.get(), &count, sizeof count);
  std::lock_guard lock(mu_);
  return std::exchange(events_, {});
}

void Watcher::watch_round(int round, bool admit) {
  {
    std::lock_guard lock(mu_);
    round_ = round;
    admit_ = admit;
  }
  cv_.notify_all();
}

void Watcher::set_peers(int node, const std::map<int, std::string>& peers) {
  std::lock_guard lock(mu_);
  new_peers_.emplace(node, peers);
}

void Watcher::apply_peers(const std::map<int, std::string>& peers) {
  peers_.clear();
  const auto now = Clock::now();
  for (const auto& [n, host] : peers) {
    Peer p;
    p.host = host;
    p.changed = now;
    peers_.emplace(n, std::move(p));
  }
}

void Watcher::stop_watching_peers() {
  std::lock_guard lock(mu_);
  watch_peers_ = false;
}

void Watcher::post(WatchEvent e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(event_fd_.get(), &one, sizeof one);
}

void Watcher::loop() {
  try {
    while (true) {
      int round = -1;
      bool peers = false;
      bool admit = false;
      std::optional<std::pair<int, std::map<int, std::string>>> new_peers;
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
        round = round_;
        peers = watch_peers_;
        admit = admit_;
        new_peers.swap(new_peers_);
      }
      if (new_peers) {
        node_ = new_peers->first;
        apply_peers(new_peers->second);
      }
      store_->add(keys_.heartbeat(node_), 1);
      if (peers) check_peers();
      if (admit && coordinator_ && round >= 0 && round != reported_round_) check_waiting(round);
      if (round >= 0 && round != reported_round_) {
        const std::vector<std::string> key{keys_.end(round)};
        try {
          store_->wait(key, deadline_in(interval_));
          WatchEvent e;
          e.kind = WatchEvent::Kind::end;
          e.round = round;
          e.value = store_->get(key.front(), deadline_in(10s));
          reported_round_ = round;
          post(std::move(e));
        } catch (const Error& e) {
          if (e.code() != ErrorCode::Timeout) throw;
        }
      } else {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, interval_, [&] { return stop_ || round_ != round; });
      }
    }
  } catch (const Error& e) {
    WatchEvent ev;
    ev.kind = WatchEvent::Kind::store_lost;
    ev.value = e.message();
    post(std::move(ev));
  }
}

void Watcher::check_waiting(int round) {
  if (store_->add(keys_.joined(round + 1), 0) == 0) return;
  // A node joined the next round while this one runs: end this one for it (once: the end key
  // is written by whoever is first).
  RoundEnd end;
  end.kind = RoundEnd::Kind::node_joined;
  end.node = -1;
  end.host = "?";
  const std::vector<std::string> first{keys_.node(round + 1, 1)};
  if (store_->check(first)) {
    try {
      end.host = nlohmann::json::parse(store_->get(first.front(), deadline_in(10s)))
                     .at("host")
                     .get<std::string>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  TANDEM_INFO(run, "tandemrun: {} is waiting to join: ending round {} for it", end.host, round);
  store_->compare_set(keys_.end(round), "", end.to_json());
}

void Watcher::check_peers() {
  const auto now = Clock::now();
  for (auto& [node, p] : peers_) {
    if (p.lost) continue;
    const std::int64_t beats = store_->add(keys_.heartbeat(node), 0);
    if (beats != p.beats) {
      p.beats = beats;
      p.changed = now;
      continue;
    }
    if (now - p.changed < lost_after_) continue;
    p.lost = true;
    const std::string why = fmt::format(
        "its tandemrun sent no heartbeat for {:.1f} s (killed, hung, or its host or network is "
        "down)",
        std::chrono::duration<double>(now - p.changed).count());
    TANDEM_INFO(run, "tandemrun: node {} ({}) lost: {}", node, p.host, why);
    int round = -1;
    {
      std::lock_guard lock(mu_);
      round = round_;
    }
    if (coordinator_ && round >= 0 && go_on_) {
      // The lost node counts as done; if it was the last one not done, the round is over.
      // (Agent::publish_success adds to done, then reads lost: one of the two sees both.)
      const std::int64_t lost = store_->add(keys_.lost(round), 1);
      const std::int64_t done = store_->add(keys_.done(round), 0);
      if (done + lost >= static_cast<std::int64_t>(peers_.size()) + 1) {
        RoundEnd end;
        end.kind = RoundEnd::Kind::success;
        end.node = node_;
        store_->compare_set(keys_.end(round), "", end.to_json());
      }
    } else if (coordinator_ && round >= 0) {
      RoundEnd end;
      end.kind = RoundEnd::Kind::node_lost;
      end.node = node;
      end.host = p.host;
      end.what = why;
      store_->compare_set(keys_.end(round), "", end.to_json());
    }
    WatchEvent e;
    e.kind = WatchEvent::Kind::node_lost;
    e.node = node;
    e.host = p.host;
    e.value = why;
    post(std::move(e));
  }
}

}  // namespace tandem::tools::tandemrun
