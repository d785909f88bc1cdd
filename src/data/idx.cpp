// IDX reader. The header is validated and the payload size bounded by what the file can
// hold before anything is allocated from it. Files are parsed from memory (parse_idx), so
// the same code reads a file and whatever bytes a fuzzer makes up; gzip is inflated there.

#include "core/net.hpp"

#include <tandem/data.hpp>
#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <zlib.h>

namespace tandem::data {

std::size_t idx_type_size(IdxType t) noexcept {
  switch (t) {
    case IdxType::u8:
    case IdxType::i8:
      return 1;
    case IdxType::i16:
      return 2;
    case IdxType::i32:
    case IdxType::f32:
      return 4;
    case IdxType::f64:
      return 8;
  }
  return 0;
}

std::string_view to_string(IdxType t) noexcept {
  switch (t) {
    case IdxType::u8:
      return "u8";
    case IdxType::i8:
      return "i8";
    case IdxType::i16:
      return "i16";
    case IdxType::i32:
      return "i32";
    case IdxType::f32:
      return "f32";
    case IdxType::f64:
      return "f64";
  }
  return "?";
}

std::size_t IdxArray::count() const noexcept {
  std::size_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

namespace {

// zlib's worst-case compression ratio is about 1032:1; a gzip file of C bytes cannot hold
// more than this many uncompressed bytes (with slack for the headers).
constexpr std::uint64_t kMaxGzipRatio = 1100;

bool is_gzip(std::span<const std::byte> b) noexcept {
  return b.size() >= 2 && b[0] == std::byte{0x1f} && b[1] == std::byte{0x8b};
}

// Sequential reads out of a file's bytes: copied when plain, inflated when gzip (a file
// may hold several gzip members one after the other, as gzip and zlib's gzread allow).
class Reader {
 public:
  Reader(std::span<const std::byte> file, std::string_view name)
      : file_(file), name_(name), gzip_(is_gzip(file)) {
    if (!gzip_) return;
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK)
      TANDEM_THROW(ErrorCode::Io, "IDX file {}: cannot start zlib: out of memory", name_);
    z_live_ = true;
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(file_.data()));
    z_.avail_in = 0;
  }
  ~Reader() {
    if (z_live_) inflateEnd(&z_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& name() const noexcept { return name_; }
  std::uint64_t file_size() const noexcept { return file_.size(); }
  bool compressed() const noexcept { return gzip_; }

  // Reads up to n bytes; returns how many (fewer only at the end of the data).
  std::size_t read(void* dst, std::size_t n) {
    const std::size_t done = gzip_ ? inflate_to(static_cast<unsigned char*>(dst), n)
                                   : copy_to(static_cast<std::byte*>(dst), n);
    offset_ += done;
    return done;
  }

  // After the payload: true when the stream has more data. Reading to the end also makes
  // zlib verify the gzip trailer (CRC and length).
  bool has_trailing_data() {
    unsigned char b = 0;
    return read(&b, 1) != 0;
  }

 private:
  std::size_t copy_to(std::byte* dst, std::size_t n) noexcept {
    const std::size_t take = std::min(n, file_.size() - in_pos_);
    if (take != 0) std::memcpy(dst, file_.data() + in_pos_, take);
    in_pos_ += take;
    return take;
  }

  std::size_t inflate_to(unsigned char* dst, std::size_t n) {
    std::size_t done = 0;
    while (done < n && !ended_) {
      const std::size_t in_left = file_.size() - in_pos_;
      z_.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(file_.data() + in_pos_));
      z_.avail_in = static_cast<uInt>(std::min<std::size_t>(in_left, 1u << 30));
      z_.next_out = dst + done;
      z_.avail_out = static_cast<uInt>(std::min<std::size_t>(n - done, 1u << 30));
      const uInt in_before = z_.avail_in;
      const uInt out_before = z_.avail_out;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      in_pos_ += in_before - z_.avail_in;
      done += out_before - z_.avail_out;
      if (rc == Z_STREAM_END) {
        next_member();
        continue;
      }
      if (rc == Z_OK) continue;
      // No progress possible: with the whole file consumed, it ended inside the stream.
      if (rc == Z_BUF_ERROR)
        fail(done, in_pos_ == file_.size() ? "unexpected end of file" : "no progress");
      fail(done, rc == Z_MEM_ERROR ? "out of memory" : (z_.msg ? z_.msg : "corrupt deflate data"));
    }
    return done;
  }

  // After a gzip member: another one may follow; anything else is corruption.
  void next_member() {
    const auto rest = file_.subspan(in_pos_);
    if (rest.empty()) {
      ended_ = true;
      return;
    }
    if (!is_gzip(rest))
      TANDEM_THROW(ErrorCode::Io,
                   "IDX file {}: {} bytes of non-gzip data after the compressed stream: corrupt "
                   "file (re-download or reinstall it)",
                   name_, rest.size());
    inflateReset(&z_);
  }

  [[noreturn]] void fail(std::size_t done, std::string_view why) const {
    TANDEM_THROW(ErrorCode::Io,
                 "IDX file {}: truncated or corrupt gzip data after {} bytes: {} (re-download or "
                 "reinstall the file)",
                 name_, offset_ + done, why);
  }

  std::span<const std::byte> file_;
  std::string name_;
  bool gzip_;
  z_stream z_{};
  bool z_live_ = false;
  bool ended_ = false;
  std::size_t in_pos_ = 0;
  std::uint64_t offset_ = 0;
};

// The whole file, refused when larger than any valid IDX file within `limits` could be
// (a gzip file is at most a little larger than its data).
std::vector<std::byte> read_file(const std::filesystem::path& path, const IdxLimits& limits) {
  const std::string name = path.string();
  const net::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd)
    TANDEM_THROW(ErrorCode::Io, "IDX file {}: cannot open: {}", name,
                 std::generic_category().message(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    TANDEM_THROW(ErrorCode::Io, "IDX file {}: cannot stat: {}", name,
                 std::generic_category().message(errno));
  const std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  const std::uint64_t max_header = 4 + 4 * std::uint64_t{255};
  constexpr std::uint64_t kNoCap = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t slack = limits.max_bytes / 64 + max_header + (64u << 10);
  const std::uint64_t cap = limits.max_bytes > kNoCap - slack ? kNoCap : limits.max_bytes + slack;
  if (size > cap)
    TANDEM_THROW(ErrorCode::Io,
                 "IDX file {}: {} bytes, more than any IDX file within the limit of {} bytes of "
                 "data can have: wrong or corrupt file",
                 name, size, limits.max_bytes);
  std::vector<std::byte> out(static_cast<std::size_t>(size));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      TANDEM_THROW(ErrorCode::Io, "IDX file {}: read failed after {} bytes: {}", name, done,
                   std::generic_category().message(errno));
    if (n == 0) break;  // shrank while being read: parsed as what is there
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return out;
}

bool known_type(std::uint8_t code) noexcept {
  switch (code) {
    case 0x08:
    case 0x09:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x0E:
      return true;
    default:
      return false;
  }
}

void to_host_order(std::vector<std::uint8_t>& bytes, std::size_t elem) {
  if (elem == 1 || std::endian::native == std::endian::big) return;
  for (std::size_t i = 0; i + elem <= bytes.size(); i += elem)
    std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(i),
                 bytes.begin() + static_cast<std::ptrdiff_t>(i + elem));
}

}  // namespace

IdxArray read_idx(const std::filesystem::path& path, const IdxLimits& limits) {
  const std::string name = path.string();
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    TANDEM_THROW(ErrorCode::Io, "IDX file {}: no such file", name);
  if (!std::filesystem::is_regular_file(status))
    TANDEM_THROW(ErrorCode::Io, "IDX file {}: not a regular file", name);
  std::vector<std::byte> file = read_file(path, limits);
  return parse_idx(file, limits, name);
}

IdxArray parse_idx(std::span<const std::byte> file, const IdxLimits& limits,
                   std::string_view file_name) {
  Reader in(file, file_name);
  const std::string& name = in.name();

  std::array<std::uint8_t, 4> magic{};
  if (in.read(magic.data(), magic.size()) != magic.size())
    TANDEM_THROW(ErrorCode::Io, "IDX file {}: too short for the 4-byte magic number ({} bytes)",
                 name, in.file_size());
  if (magic[0] != 0 || magic[1] != 0)
    TANDEM_THROW(ErrorCode::Io,
                 "IDX file {}: bad magic number {:02x}{:02x}{:02x}{:02x} (an IDX file starts "
                 "with two zero bytes): not an IDX file",
                 name, magic[0], magic[1], magic[2], magic[3]);
  if (!known_type(magic[2]))
    TANDEM_THROW(ErrorCode::Io,
                 "IDX file {}: unknown element type code 0x{:02x} (known: 0x08 u8, 0x09 i8, "
                 "0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)",
                 name, magic[2]);
  const auto type = static_cast<IdxType>(magic[2]);
  const std::size_t ndim = magic[3];
  if (ndim == 0 || ndim > limits.max_ndim)
    TANDEM_THROW(ErrorCode::Io, "IDX file {}: {} dimensions (expected 1 to {})", name, ndim,
                 limits.max_ndim);

  IdxArray out;
  out.type = type;
  out.dims.resize(ndim);
  const std::uint64_t elem = idx_type_size(type);
  std::uint64_t total = elem;
  for (std::size_t d = 0; d < ndim; ++d) {
    std::array<std::uint8_t, 4> be{};
    if (in.read(be.data(), be.size()) != be.size())
      TANDEM_THROW(ErrorCode::Io, "IDX file {}: truncated header: dimension {} of {} missing", name,
                   d, ndim);
    const std::uint64_t dim = (std::uint64_t{be[0]} << 24) | (std::uint64_t{be[1]} << 16) |
                              (std::uint64_t{be[2]} << 8) | std::uint64_t{be[3]};
    out.dims[d] = static_cast<std::size_t>(dim);
    // Both factors are below 2^32 + limits; check before multiplying so nothing overflows.
    if (dim != 0 && total > limits.max_bytes / dim)
      TANDEM_THROW(ErrorCode::Io,
                   "IDX file {}: dimensions {} x ... hold more than the limit of {} bytes "
                   "(corrupt header?)",
                   name, fmt::join(std::span(out.dims.data(), d + 1), " x "), limits.max_bytes);
    total *= dim;
  }

  const std::uint64_t header = 4 + 4 * ndim;
  const bool gz = in.compressed();
  const std::uint64_t can_hold = gz ? in.file_size() * kMaxGzipRatio
                                    : (in.file_size() >= header ? in.file_size() - header : 0);
  if (total > can_hold)
    TANDEM_THROW(ErrorCode::Io,
                 "IDX file {}: header says {} ({} elements of {} = {} bytes) but the {}file has "
                 "{} bytes{}: truncated or corrupt",
                 name, fmt::join(out.dims, " x "), total / elem, to_string(type), total,
                 gz ? "gzip " : "", in.file_size(),
                 gz ? fmt::format(", which cannot hold more than {}", can_hold)
                    : fmt::format(" ({} of payload)", can_hold));

  out.bytes.resize(static_cast<std::size_t>(total));
  const std::size_t got = in.read(out.bytes.data(), out.bytes.size());
  if (got != out.bytes.size())
    TANDEM_THROW(ErrorCode::Io,
                 "IDX file {}: truncated: header says {} = {} bytes of data, the file ends after "
                 "{}",
                 name, fmt::join(out.dims, " x "), total, got);
  if (in.has_trailing_data())
    TANDEM_THROW(ErrorCode::Io,
                 "IDX file {}: data continues after the {} bytes that the header ({}) describes: "
                 "corrupt header or wrong file",
                 name, total, fmt::join(out.dims, " x "));
  to_host_order(out.bytes, static_cast<std::size_t>(elem));
  TANDEM_DETAIL(data, "read {}: {} {}", name, to_string(type), fmt::join(out.dims, "x"));
  return out;
}

}  // namespace tandem::data
