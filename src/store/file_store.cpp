// FileStore: one append-only file. The file starts with an 8-byte tag; every record is
//   u8 kind (1 = set, 2 = delete), u32 key_len, u32 value_len, key, value   (little-endian)
// and the latest record of a key wins. Every operation holds flock(LOCK_EX) on the file
// (acquired with backoff until a deadline, never unbounded) and first reads the records
// other processes appended since its last look.

#include "core/net.hpp"
#include "store/common.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/store.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

namespace tandem::store {
namespace {

constexpr char kFileTag[8] = {'T', 'N', 'D', 'S', 'F', 'S', '0', '1'};
constexpr std::uint8_t kSetRecord = 1;
constexpr std::uint8_t kDeleteRecord = 2;
constexpr std::size_t kRecordHeader = 9;
constexpr std::size_t kMaxFileValueBytes = 64u << 20;

std::uint32_t load_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Sleeps between polls: short at first (a peer usually answers quickly), up to 50 ms.
class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds first, std::chrono::microseconds cap)
      : next_(first), cap_(cap) {}
  // False when the deadline has passed.
  bool sleep(Deadline deadline) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(next_, deadline - now));
    next_ = std::min(next_ * 2, cap_);
    return true;
  }

 private:
  std::chrono::microseconds next_;
  std::chrono::microseconds cap_;
};

}  // namespace

struct FileStore::Impl {
  std::string path;
  net::Fd fd;
  std::mutex mu;  // flock does not exclude threads that share this fd
  std::unordered_map<std::string, std::string> map;
  std::uint64_t offset = 0;  // bytes of the file already applied to `map`
  pid_t owner = -1;          // process that opened `fd`

  // flock belongs to the open file description, which a forked child shares with its
  // parent: a child must open the file again or the two would not exclude each other.
  void open_for_this_process() {
    fd.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!fd)
      TANDEM_THROW(
          ErrorCode::Io,
          "FileStore: cannot open {}: {} (the directory must exist and be writable by every rank)",
          path, net::errno_string(errno));
    owner = ::getpid();
  }

  [[noreturn]] void corrupt(std::uint64_t at, const std::string& why) const {
    TANDEM_THROW(
        ErrorCode::Io,
        "FileStore {}: corrupt record at offset {}: {}; the file was truncated or written by "
        "something else (remove it and restart the job)",
        path, at, why);
  }

  // Holds the exclusive flock for one operation.
  class Locked {
   public:
    Locked(Impl& impl, Deadline deadline) : impl_(impl), guard_(impl.mu) {
      if (impl_.owner != ::getpid()) impl_.open_for_this_process();
      Backoff backoff(std::chrono::microseconds(50), std::chrono::milliseconds(10));
      const auto start = Clock::now();
      for (;;) {
        if (::flock(impl_.fd.get(), LOCK_EX | LOCK_NB) == 0) break;
        const int err = errno;
        if (err == EINTR) continue;
        if (err != EWOULDBLOCK)
          TANDEM_THROW(ErrorCode::Io,
                       "FileStore {}: flock failed: {} (does the filesystem support flock?)",
                       impl_.path, net::errno_string(err));
        if (!backoff.sleep(deadline))
          TANDEM_THROW(
              ErrorCode::Timeout,
              "FileStore {}: could not lock the file within {:.1f} s (another process holds it; "
              "is one stuck?)",
              impl_.path, std::chrono::duration<double>(Clock::now() - start).count());
      }
      try {
        impl_.refresh();
      } catch (...) {
        ::flock(impl_.fd.get(), LOCK_UN);
        throw;
      }
    }
    ~Locked() { ::flock(impl_.fd.get(), LOCK_UN); }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    Impl& impl_;
    std::lock_guard<std::mutex> guard_;
  };

  // Applies the records appended since `offset` (lock held).
  void refresh() {
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
      TANDEM_THROW(ErrorCode::Io, "FileStore {}: fstat failed: {}", path, net::errno_string(errno));
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size == 0) {
      append_raw(std::string(kFileTag, sizeof kFileTag));
      map.clear();
      offset = sizeof kFileTag;
      return;
    }
    if (size < offset) {  // someone truncated the file: start over
      TANDEM_WARN(store, "FileStore {}: the file shrank from {} to {} bytes; re-reading it", path,
                  offset, size);
      map.clear();
      offset = 0;
    }
    if (size == offset) return;
    std::string buf(size - offset, '\0');
    read_at(buf.data(), buf.size(), offset);
    std::size_t pos = 0;
    if (offset == 0) {
      if (buf.size() < sizeof kFileTag || std::memcmp(buf.data(), kFileTag, sizeof kFileTag) != 0)
        TANDEM_THROW(
            ErrorCode::Io,
            "FileStore {}: the file exists but is not a tandem FileStore (wrong header); use a "
            "fresh path",
            path);
      pos = sizeof kFileTag;
    }
    while (pos < buf.size()) {
      const std::uint64_t at = offset + pos;
      if (buf.size() - pos < kRecordHeader) corrupt(at, "truncated record header");
      const auto kind = static_cast<std::uint8_t>(buf[pos]);
      const std::uint32_t klen = load_u32(buf.data() + pos + 1);
      const std::uint32_t vlen = load_u32(buf.data() + pos + 5);
      if (kind != kSetRecord && kind != kDeleteRecord)
        corrupt(at, fmt::format("unknown record kind {}", kind));
      if (klen > kMaxKeyBytes)
        corrupt(at, fmt::format("key length {} exceeds {}", klen, kMaxKeyBytes));
      if (vlen > kMaxFileValueBytes)
        corrupt(at, fmt::format("value length {} exceeds {}", vlen, kMaxFileValueBytes));
      if (kind == kDeleteRecord && vlen != 0) corrupt(at, "delete record with a value");
      const std::size_t body = static_cast<std::size_t>(klen) + vlen;
      if (buf.size() - pos - kRecordHeader < body)
        corrupt(at, fmt::format("record of {} bytes runs past the end of the file",
                                kRecordHeader + body));
      std::string key(buf.data() + pos + kRecordHeader, klen);
      if (kind == kSetRecord)
        map.insert_or_assign(std::move(key),
                             std::string(buf.data() + pos + kRecordHeader + klen, vlen));
      else
        map.erase(key);
      pos += kRecordHeader + body;
    }
    offset = size;
  }

  void read_at(char* p, std::size_t n, std::uint64_t at) const {
    std::size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd.get(), p + done, n - done, static_cast<off_t>(at + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        TANDEM_THROW(ErrorCode::Io, "FileStore {}: read failed: {}", path,
                     net::errno_string(errno));
      if (got == 0) corrupt(at + done, "the file ended while reading it");
      done += static_cast<std::size_t>(got);
    }
  }

  void append_raw(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t put = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
      if (put < 0 && errno == EINTR) continue;
      if (put < 0)
        TANDEM_THROW(ErrorCode::Io,
                     "FileStore {}: write failed: {} (disk full? read-only filesystem?)", path,
                     net::errno_string(errno));
      done += static_cast<std::size_t>(put);
    }
    offset += bytes.size();
  }

  void append(std::uint8_t kind, std::string_view key, std::string_view value) {
    if (value.size() > kMaxFileValueBytes)
      TANDEM_THROW(ErrorCode::InvalidArgument,
                   "FileStore {}: value of {} bytes for key {} exceeds {} bytes", path,
                   value.size(), printable(key), kMaxFileValueBytes);
    std::string rec;
    rec.reserve(kRecordHeader + key.size() + value.size());
    rec.push_back(static_cast<char>(kind));
    put_u32(rec, static_cast<std::uint32_t>(key.size()));
    put_u32(rec, static_cast<std::uint32_t>(value.size()));
    rec.append(key);
    rec.append(value);
    append_raw(rec);
    if (kind == kSetRecord)
      map.insert_or_assign(std::string(key), std::string(value));
    else
      map.erase(std::string(key));
  }

  std::vector<std::string> missing(std::span<const std::string> keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (!map.contains(k)) out.push_back(k);
    return out;
  }

  // Polls until every key exists; returns the value of the first one.
  std::string wait_for(std::span<const std::string> keys, Deadline deadline, std::string_view op) {
    Backoff backoff(std::chrono::milliseconds(1), std::chrono::milliseconds(50));
    const auto start = Clock::now();
    for (;;) {
      std::vector<std::string> miss;
      {
        Locked lock(*this, std::max(deadline, deadline_in(std::chrono::seconds(1))));
        miss = missing(keys);
        if (miss.empty()) return keys.empty() ? std::string() : map.at(keys[0]);
      }
      if (!backoff.sleep(deadline))
        throw_wait_timeout(fmt::format("FileStore {}: {}", path, op), miss, Clock::now() - start);
    }
  }
};

FileStore::FileStore(std::string path) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->open_for_this_process();
  Impl::Locked lock(*impl_,
                    deadline_after_ms(timeout().count()));  // validates (or writes) the header
}

FileStore::~FileStore() = default;

void FileStore::set(std::string_view key, std::string_view value) {
  check_key(key);
  Impl::Locked lock(*impl_, deadline_after_ms(timeout().count()));
  impl_->append(kSetRecord, key, value);
}

std::string FileStore::get(std::string_view key, Deadline deadline) {
  check_key(key);
  const std::string keys[] = {std::string(key)};
  return impl_->wait_for(keys, deadline, "get");
}

std::int64_t FileStore::add(std::string_view key, std::int64_t delta) {
  check_key(key);
  Impl::Locked lock(*impl_, deadline_after_ms(timeout().count()));
  auto it = impl_->map.find(std::string(key));
  std::optional<std::string_view> current;
  if (it != impl_->map.end()) current = it->second;
  std::int64_t result = 0;
  const std::string next = add_value(key, current, delta, &result);
  impl_->append(kSetRecord, key, next);
  return result;
}

std::string FileStore::compare_set(std::string_view key, std::string_view expected,
                                   std::string_view desired) {
  check_key(key);
  Impl::Locked lock(*impl_, deadline_after_ms(timeout().count()));
  auto it = impl_->map.find(std::string(key));
  const bool matches = it == impl_->map.end() ? expected.empty() : it->second == expected;
  if (!matches) return it == impl_->map.end() ? std::string() : it->second;
  impl_->append(kSetRecord, key, desired);
  return std::string(desired);
}

void FileStore::wait(std::span<const std::string> keys, Deadline deadline) {
  check_key_count(keys.size());
  for (const auto& k : keys) check_key(k);
  impl_->wait_for(keys, deadline, "wait");
}

bool FileStore::check(std::span<const std::string> keys) {
  check_key_count(keys.size());
  Impl::Locked lock(*impl_, deadline_after_ms(timeout().count()));
  return impl_->missing(keys).empty();
}

bool FileStore::delete_key(std::string_view key) {
  check_key(key);
  Impl::Locked lock(*impl_, deadline_after_ms(timeout().count()));
  if (!impl_->map.contains(std::string(key))) return false;
  impl_->append(kDeleteRecord, key, {});
  return true;
}

std::int64_t FileStore::num_keys() {
  Impl::Locked lock(*impl_, deadline_after_ms(timeout().count()));
  return static_cast<std::int64_t>(impl_->map.size());
}

std::int64_t FileStore::num_keys_with_prefix(std::string_view prefix) {
  Impl::Locked lock(*impl_, deadline_after_ms(timeout().count()));
  return std::count_if(impl_->map.begin(), impl_->map.end(),
                       [&](const auto& kv) { return kv.first.starts_with(prefix); });
}

}  // namespace tandem::store
