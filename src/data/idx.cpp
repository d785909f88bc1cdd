// IDX reader. The header is validated and the payload size bounded by what the file can
// hold before anything is allocated from it; gzip and plain files go through zlib's gz*
// API (which reads plain files transparently).

#include <tandem/data.hpp>
#include <tandem/error.hpp>
#include <tandem/log.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
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

struct GzClose {
  void operator()(gzFile f) const noexcept { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzClose>;

class Reader {
 public:
  Reader(const std::filesystem::path& path) : path_(path) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status))
      TANDEM_THROW(ErrorCode::Io, "IDX file {}: no such file", path.string());
    if (!std::filesystem::is_regular_file(status))
      TANDEM_THROW(ErrorCode::Io, "IDX file {}: not a regular file", path.string());
    file_size_ = std::filesystem::file_size(path, ec);
    if (ec)
      TANDEM_THROW(ErrorCode::Io, "IDX file {}: cannot stat: {}", path.string(), ec.message());
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_)
      TANDEM_THROW(ErrorCode::Io, "IDX file {}: cannot open: {}", path.string(),
                   std::generic_category().message(errno));
    gzbuffer(file_.get(), 1u << 17);
  }

  const std::string& name() const noexcept { return path_str(); }
  std::uint64_t file_size() const noexcept { return file_size_; }
  bool compressed() { return gzdirect(file_.get()) == 0; }

  // Reads up to n bytes; returns how many (fewer only at the end of the data).
  std::size_t read(void* dst, std::size_t n) {
    auto* p = static_cast<unsigned char*>(dst);
    std::size_t done = 0;
    while (done < n) {
      const auto want = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      const int got = gzread(file_.get(), p + done, want);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(file_.get(), &code);
        TANDEM_THROW(ErrorCode::Io,
                     "IDX file {}: corrupt or truncated gzip data after {} bytes: {} (re-download "
                     "or reinstall the file)",
                     path_str(), offset_ + done, msg ? msg : "unknown zlib error");
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    // A gzip stream cut short (even only in its CRC/length trailer) ends the data without a
    // negative return; zlib records it as Z_BUF_ERROR "unexpected end of file".
    // Checked on short reads only: zlib reports it while filling its buffer, before the
    // bytes that did arrive were handed out.
    int code = Z_OK;
    const char* msg = done < n ? gzerror(file_.get(), &code) : nullptr;
    if (code != Z_OK)
      TANDEM_THROW(ErrorCode::Io,
                   "IDX file {}: truncated or corrupt gzip data after {} bytes: {} (re-download "
                   "or reinstall the file)",
                   path_str(), offset_ + done, msg ? msg : "unknown zlib error");
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
  const std::string& path_str() const noexcept {
    if (name_.empty()) name_ = path_.string();
    return name_;
  }
  std::filesystem::path path_;
  mutable std::string name_;
  GzFile file_;
  std::uint64_t file_size_ = 0;
  std::uint64_t offset_ = 0;
};

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
  Reader in(path);
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
