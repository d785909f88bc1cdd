// Checkpoints: rank 0 writes `ckpt-<step>.tdm` atomically (temporary file, fsync, rename, fsync
// of the directory) and tells every rank how it went; every rank loads the newest valid file.
//
// File layout (little-endian):
//   header  "TANDEMCK" | u32 version | u32 header bytes | u64 payload bytes | u32 CRC-32 | u32 0
//   payload 4 sections, each u64 length + bytes: metadata JSON, model archive, optimizer
//           archive, CPU generator states (one per rank, equal sizes)

#include "torch/checkpoint_file.hpp"
#include "torch/tensor_util.hpp"

#include <tandem/error.hpp>
#include <tandem/log.hpp>
#include <tandem/torch.hpp>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <sstream>
#include <zlib.h>

namespace tandem::torch {

namespace detail {
WriteProbe& write_probe() noexcept {
  static WriteProbe instance;
  return instance;
}
}  // namespace detail

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using detail::probe;
using detail::read_bounded;
using detail::write_atomically;

constexpr std::array<char, 8> kMagic = {'T', 'A', 'N', 'D', 'E', 'M', 'C', 'K'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 32;
constexpr std::size_t kSections = 4;
// Bounds on what a file may claim, checked before anything is allocated from it.
constexpr std::uint64_t kMaxPayload = std::uint64_t{256} << 30;
constexpr std::uint64_t kMaxMetadata = std::uint64_t{16} << 20;
constexpr std::uint64_t kMaxLatest = 4096;
constexpr std::size_t kMaxStatusMessage = 4000;
constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".tdm";

// ---- bytes --------------------------------------------------------------------------------

template <class T>
void put(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <class T>
T get(std::string_view in, std::size_t at) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

std::uint32_t crc32_of(std::string_view bytes) {
  return static_cast<std::uint32_t>(::crc32_z(
      ::crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// ---- names --------------------------------------------------------------------------------

std::optional<std::uint64_t> step_of(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix))
    return std::nullopt;
  const char* b = name.data() + kPrefix.size();
  const char* e = name.data() + name.size() - kSuffix.size();
  std::uint64_t step = 0;
  auto [p, ec] = std::from_chars(b, e, step);
  if (ec != std::errc() || p != e) return std::nullopt;
  return step;
}

std::string file_name(std::uint64_t step) {
  return fmt::format("{}{}{}", kPrefix, step, kSuffix);
}

// Checkpoint files of the directory, newest step first.
std::vector<std::pair<std::uint64_t, fs::path>> list_checkpoints(const fs::path& dir) {
  std::vector<std::pair<std::uint64_t, fs::path>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto step = step_of(it->path().filename().string());
    if (step && it->is_regular_file(ec)) out.emplace_back(*step, it->path());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

// Temporary files left by a writer killed mid-save ("ckpt-<step>.tdm.tmp", "latest.tmp"):
// never read (their names are not checkpoints), removed by the next save.
void remove_stale_temporaries(const fs::path& dir) {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool ours =
        name == "latest.tmp" ||
        (name.ends_with(".tmp") && step_of(name.substr(0, name.size() - 4)).has_value());
    if (ours) stale.push_back(it->path());
  }
  for (const auto& path : stale) {
    probe("remove", path);
    if (!fs::remove(path, ec) && ec)
      TANDEM_WARN(data, "checkpoint: cannot remove the stale temporary file {}: {}", path.string(),
                  ec.message());
  }
}

// ---- content ------------------------------------------------------------------------------

struct Contents {
  json meta;
  std::string_view model;
  std::string_view optimizer;
  std::string_view rng;
};

std::string encode(const json& meta, const std::string& model, const std::string& optimizer,
                   const std::string& rng) {
  std::string payload;
  const std::string meta_text = meta.dump();
  for (const std::string* s : {&meta_text, &model, &optimizer, &rng}) {
    put<std::uint64_t>(payload, s->size());
    payload += *s;
  }
  std::string file;
  file.reserve(kHeaderBytes + payload.size());
  file.append(kMagic.data(), kMagic.size());
  put<std::uint32_t>(file, kVersion);
  put<std::uint32_t>(file, kHeaderBytes);
  put<std::uint64_t>(file, payload.size());
  put<std::uint32_t>(file, crc32_of(payload));
  put<std::uint32_t>(file, 0);
  return file + payload;
}

// Checks everything a file claims; throws Error(Io) saying what is wrong (the caller adds the
// file name). The views point into `file`.
Contents decode(std::string_view file) {
  if (file.size() < kHeaderBytes)
    TANDEM_THROW(ErrorCode::Io, "truncated: {} bytes, shorter than the {}-byte header", file.size(),
                 kHeaderBytes);
  if (std::memcmp(file.data(), kMagic.data(), kMagic.size()) != 0)
    TANDEM_THROW(ErrorCode::Io, "bad magic: not a tandem checkpoint");
  const auto version = get<std::uint32_t>(file, 8);
  if (version != kVersion)
    TANDEM_THROW(ErrorCode::Io, "format version {} (this tandem reads version {})", version,
                 kVersion);
  const auto header = get<std::uint32_t>(file, 12);
  if (header != kHeaderBytes)
    TANDEM_THROW(ErrorCode::Io, "header size {} (expected {})", header, kHeaderBytes);
  const auto length = get<std::uint64_t>(file, 16);
  if (length > kMaxPayload || length != file.size() - kHeaderBytes)
    TANDEM_THROW(ErrorCode::Io,
                 "truncated or padded: the header announces {} payload bytes, the "
                 "file holds {}",
                 length, file.size() - kHeaderBytes);
  const std::string_view payload = file.substr(kHeaderBytes);
  const auto crc = get<std::uint32_t>(file, 24);
  if (crc32_of(payload) != crc)
    TANDEM_THROW(ErrorCode::Io,
                 "CRC-32 mismatch (stored {:08x}, computed {:08x}): the content is "
                 "corrupt",
                 crc, crc32_of(payload));
  std::array<std::string_view, kSections> sections;
  std::size_t at = 0;
  for (std::size_t i = 0; i < kSections; ++i) {
    if (payload.size() - at < 8) TANDEM_THROW(ErrorCode::Io, "section {} header is cut off", i);
    const auto n = get<std::uint64_t>(payload, at);
    at += 8;
    if (n > payload.size() - at)
      TANDEM_THROW(ErrorCode::Io, "section {} claims {} bytes, {} are left", i, n,
                   payload.size() - at);
    sections[i] = payload.substr(at, static_cast<std::size_t>(n));
    at += static_cast<std::size_t>(n);
  }
  if (at != payload.size())
    TANDEM_THROW(ErrorCode::Io, "{} bytes after the last section", payload.size() - at);
  if (sections[0].size() > kMaxMetadata)
    TANDEM_THROW(ErrorCode::Io, "metadata of {} bytes", sections[0].size());
  Contents c;
  c.meta = json::parse(sections[0], nullptr, false);
  if (c.meta.is_discarded() || !c.meta.is_object())
    TANDEM_THROW(ErrorCode::Io, "the metadata is not a JSON object");
  c.model = sections[1];
  c.optimizer = sections[2];
  c.rng = sections[3];
  return c;
}

json to_json(const TrainingState& s) {
  json j;
  j["step"] = s.step;
  j["epoch"] = s.epoch;
  j["sampler"] = {{"epoch", s.sampler.epoch},
                  {"position", s.sampler.position},
                  {"seed", s.sampler.seed},
                  {"replicas", s.sampler.replicas},
                  {"offset", s.sampler.offset}};
  if (s.scaler) {
    j["scaler"] = {{"scale", s.scaler->scale}, {"growth_tracker", s.scaler->growth_tracker}};
  } else {
    j["scaler"] = nullptr;
  }
  j["extra_json"] = s.extra_json;
  return j;
}

template <class T>
T field(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) TANDEM_THROW(ErrorCode::Io, "metadata lacks '{}'", key);
  if constexpr (std::is_same_v<T, std::uint64_t>) {
    if (!it->is_number_unsigned())
      TANDEM_THROW(ErrorCode::Io, "metadata '{}' is not an unsigned integer", key);
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    if (!it->is_number_integer())
      TANDEM_THROW(ErrorCode::Io, "metadata '{}' is not an integer", key);
  } else if constexpr (std::is_same_v<T, double>) {
    if (!it->is_number()) TANDEM_THROW(ErrorCode::Io, "metadata '{}' is not a number", key);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) TANDEM_THROW(ErrorCode::Io, "metadata '{}' is not a string", key);
  } else if constexpr (std::is_same_v<T, json>) {
    if (!it->is_object() && !it->is_null())
      TANDEM_THROW(ErrorCode::Io, "metadata '{}' is not an object", key);
  }
  return it->get<T>();
}

TrainingState state_from_json(const json& j) {
  TrainingState s;
  s.step = field<std::uint64_t>(j, "step");
  s.epoch = field<std::uint64_t>(j, "epoch");
  const json sampler = field<json>(j, "sampler");
  if (!sampler.is_object()) TANDEM_THROW(ErrorCode::Io, "metadata 'sampler' is not an object");
  s.sampler.epoch = field<std::uint64_t>(sampler, "epoch");
  s.sampler.position = field<std::uint64_t>(sampler, "position");
  s.sampler.seed = field<std::uint64_t>(sampler, "seed");
  // Absent in checkpoints of earlier versions: the loading sampler's replicas, no offset.
  s.sampler.replicas = sampler.value("replicas", std::uint64_t{0});
  s.sampler.offset = sampler.value("offset", std::uint64_t{0});
  const json scaler = field<json>(j, "scaler");
  if (scaler.is_object())
    s.scaler = GradScalerState{field<double>(scaler, "scale"),
                               field<std::int64_t>(scaler, "growth_tracker")};
  s.extra_json = field<std::string>(j, "extra_json");
  return s;
}

std::string rng_state_bytes() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard lock(gen.mutex());
  const at::Tensor t = gen.get_state().contiguous();
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<std::size_t>(t.numel()));
}

void set_rng_state(std::string_view bytes) {
  auto t = ::torch::empty({static_cast<std::int64_t>(bytes.size())}, ::torch::kUInt8);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard lock(gen.mutex());
  gen.set_state(t);
}

// Every rank's generator state, concatenated (collective; every state has the same size).
std::string gather_rng_states(Communicator& comm) {
  const std::string mine = rng_state_bytes();
  if (comm.size() == 1) return mine;
  std::int64_t size = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(comm.size()));
  comm.allgather(BufferView::raw(&size, 1, DataType::i64),
                 BufferView::of(std::span<std::int64_t>(sizes)));
  for (auto s : sizes)
    TANDEM_CHECK(s == size, "CPU generator states differ in size across ranks ({} and {})", s,
                 size);
  std::string all(mine.size() * sizes.size(), '\0');
  comm.allgather(BufferView::raw(const_cast<char*>(mine.data()), mine.size(), DataType::u8),
                 BufferView::raw(all.data(), all.size(), DataType::u8));
  return all;
}

std::string archive_bytes(const std::function<void(::torch::serialize::OutputArchive&)>& fill) {
  ::torch::serialize::OutputArchive archive;
  fill(archive);
  std::ostringstream out;
  archive.save_to(out);
  return std::move(out).str();
}

// Module::load's counterpart that copies into the existing tensors instead of re-pointing them
// (set_): storage, gradients and autograd's accumulators stay as DDP registered them. Every
// tensor is read and checked before the first one is overwritten.
void collect_tensors(::torch::nn::Module& module, ::torch::serialize::InputArchive& archive,
                     const std::string& prefix,
                     std::vector<std::pair<::torch::Tensor, ::torch::Tensor>>& pairs) {
  auto read = [&](const std::string& name, const ::torch::Tensor& dst, bool buffer) {
    ::torch::Tensor src;
    archive.read(name, src, buffer);
    if (!src.sizes().equals(dst.sizes()) || src.scalar_type() != dst.scalar_type())
      TANDEM_THROW(ErrorCode::InvalidArgument, "{} '{}{}' is {} in the checkpoint but {} here",
                   buffer ? "buffer" : "parameter", prefix, name, detail::describe(src),
                   detail::describe(dst));
    pairs.emplace_back(dst, src);
  };
  for (const auto& p : module.named_parameters(false)) read(p.key(), p.value(), false);
  for (const auto& b : module.named_buffers(false)) read(b.key(), b.value(), true);
  for (const auto& child : module.named_children()) {
    ::torch::serialize::InputArchive sub;
    archive.read(child.key(), sub);
    collect_tensors(*child.value(), sub, prefix + child.key() + ".", pairs);
  }
}

void load_in_place(::torch::nn::Module& module, ::torch::serialize::InputArchive& archive) {
  std::vector<std::pair<::torch::Tensor, ::torch::Tensor>> pairs;
  collect_tensors(module, archive, "", pairs);
  ::torch::NoGradGuard no_grad;
  for (auto& [dst, src] : pairs) dst.copy_(src);
}

// What went wrong, without the C++ backtrace that torch's errors carry.
std::string reason_of(const std::exception& e) {
  if (const auto* te = dynamic_cast<const Error*>(&e)) return te->message();
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

// The model and optimizer sections of `c` into module (in place) and optimizer, on the
// module's device wherever they were saved: a run saved on a GPU resumes on the CPU and the
// other way round.
void load_contents(const Contents& c, ::torch::nn::Module& module,
                   ::torch::optim::Optimizer& optimizer) {
  const auto params = module.parameters();
  const auto device = params.empty() ? c10::Device(c10::kCPU) : params.front().device();
  ::torch::serialize::InputArchive model;
  model.load_from(c.model.data(), c.model.size(), device);
  load_in_place(module, model);
  ::torch::serialize::InputArchive optim;
  optim.load_from(c.optimizer.data(), c.optimizer.size(), device);
  optimizer.load(optim);
}

}  // namespace

Checkpointer::Checkpointer(std::shared_ptr<Communicator> comm, std::filesystem::path dir,
                           CheckpointOptions options)
    : comm_(std::move(comm)), dir_(std::move(dir)), options_(options) {
  TANDEM_CHECK_ARG(comm_ != nullptr, "Checkpointer: no communicator");
  TANDEM_CHECK_ARG(!dir_.empty(), "Checkpointer: empty directory");
  TANDEM_CHECK_ARG(options_.keep_last >= 1, "Checkpointer: keep_last must be at least 1");
}

const std::filesystem::path& Checkpointer::directory() const noexcept {
  return dir_;
}

std::filesystem::path Checkpointer::save(::torch::nn::Module& module,
                                         ::torch::optim::Optimizer& optimizer,
                                         const TrainingState& state) {
  const fs::path target = dir_ / file_name(state.step);
  const std::string rng = gather_rng_states(*comm_);
  std::string failure;
  if (comm_->rank() == 0) {
    try {
      json meta = to_json(state);
      meta["format"] = "tandem-checkpoint";
      meta["world_size"] = comm_->size();
      meta["rng_ranks"] = comm_->size();
      const std::string model =
          archive_bytes([&](::torch::serialize::OutputArchive& a) { module.save(a); });
      const std::string optim =
          archive_bytes([&](::torch::serialize::OutputArchive& a) { optimizer.save(a); });
      const std::string file = encode(meta, model, optim, rng);
      std::error_code ec;
      fs::create_directories(dir_, ec);
      if (ec)
        TANDEM_THROW(ErrorCode::Io, "checkpoint: cannot create directory {}: {}", dir_.string(),
                     ec.message());
      remove_stale_temporaries(dir_);
      fs::path tmp = target;
      tmp += ".tmp";
      write_atomically(tmp, target, file);
      write_atomically(dir_ / "latest.tmp", dir_ / "latest", target.filename().string() + "\n");
      const auto files = list_checkpoints(dir_);
      std::size_t kept = 1;  // the file just written
      for (const auto& [step, path] : files) {
        if (path == target) continue;
        if (kept < options_.keep_last) {
          ++kept;
          continue;
        }
        probe("remove", path);
        fs::remove(path, ec);
        if (ec)
          TANDEM_WARN(data, "checkpoint: cannot remove old checkpoint {}: {}", path.string(),
                      ec.message());
      }
      TANDEM_INFO(data, "checkpoint: wrote {} ({} bytes, step {})", target.string(), file.size(),
                  state.step);
    } catch (const Error& e) {
      failure = e.message();
    } catch (const std::exception& e) {
      failure = fmt::format("checkpoint: writing {} failed: {}", target.string(), e.what());
    }
  }
  // Rank 0 tells every rank how the write went (so they return only once the file exists, and
  // all fail together when it could not be written).
  if (comm_->size() > 1) {
    std::array<std::int64_t, 2> status{
        failure.empty() ? 0 : 1,
        static_cast<std::int64_t>(std::min(failure.size(), kMaxStatusMessage))};
    comm_->broadcast(BufferView::of(std::span<std::int64_t>(status)), 0);
    if (status[0] != 0) {
      const auto n = static_cast<std::size_t>(
          std::clamp<std::int64_t>(status[1], 0, static_cast<std::int64_t>(kMaxStatusMessage)));
      failure.resize(n);
      if (n > 0) comm_->broadcast(BufferView::raw(failure.data(), n, DataType::u8), 0);
      if (comm_->rank() != 0)
        TANDEM_THROW(ErrorCode::Io, "checkpoint {} was not saved by rank 0: {}", target.string(),
                     failure);
    }
  }
  if (!failure.empty()) TANDEM_THROW(ErrorCode::Io, "{}", failure);
  return target;
}

std::optional<TrainingState> Checkpointer::load_latest(::torch::nn::Module& module,
                                                       ::torch::optim::Optimizer& optimizer) {
  std::optional<TrainingState> result;
  std::exception_ptr error;
  try {
    std::vector<fs::path> candidates;
    std::error_code ec;
    const fs::path latest = dir_ / "latest";
    if (fs::exists(latest, ec)) {
      try {
        std::string name = read_bounded(latest, kMaxLatest);
        while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
        if (!step_of(name))
          TANDEM_THROW(ErrorCode::Io, "it names '{}', not a ckpt-<step>.tdm file", name);
        candidates.push_back(dir_ / name);
      } catch (const Error& e) {
        TANDEM_WARN(data, "checkpoint: ignoring {}: {}; looking for ckpt-*.tdm files",
                    latest.string(), e.message());
      }
    }
    for (const auto& [step, path] : list_checkpoints(dir_))
      if (std::find(candidates.begin(), candidates.end(), path) == candidates.end())
        candidates.push_back(path);

    std::vector<std::string> rejected;
    for (const auto& path : candidates) {
      std::string file;
      Contents c;
      TrainingState state;
      std::uint64_t ranks = 0;
      try {
        file = read_bounded(path, kHeaderBytes + kMaxPayload);
        c = decode(file);
        state = state_from_json(c.meta);
        ranks = field<std::uint64_t>(c.meta, "rng_ranks");
      } catch (const Error& e) {
        TANDEM_WARN(data, "checkpoint: {} is unusable ({}); trying the next older one",
                    path.string(), e.message());
        rejected.push_back(fmt::format("{} ({})", path.string(), e.message()));
        continue;
      }
      try {
        load_contents(c, module, optimizer);
      } catch (const std::exception& e) {
        TANDEM_THROW(ErrorCode::InvalidArgument,
                     "checkpoint {} does not fit this model or optimizer: {}. Resume with the "
                     "same model and optimizer, or move the directory away to start afresh",
                     path.string(), reason_of(e));
      }
      if (ranks > 0 && !c.rng.empty() && c.rng.size() % ranks == 0) {
        const std::size_t each = c.rng.size() / ranks;
        const auto mine = static_cast<std::uint64_t>(comm_->rank());
        if (mine >= ranks)
          TANDEM_WARN(data,
                      "checkpoint: {} holds the RNG states of {} ranks; rank {} takes "
                      "rank 0's",
                      path.string(), ranks, comm_->rank());
        set_rng_state(c.rng.substr(mine < ranks ? mine * each : 0, each));
      }
      TANDEM_INFO(data, "checkpoint: loaded {} (step {}, epoch {})", path.string(), state.step,
                  state.epoch);
      result = std::move(state);
      break;
    }
    if (!result && !rejected.empty())
      TANDEM_THROW(ErrorCode::Io,
                   "checkpoint: no valid checkpoint in {}: {}. Remove the damaged files to start "
                   "afresh",
                   dir_.string(), fmt::join(rejected, "; "));
  } catch (...) {
    error = std::current_exception();
  }

  // Every rank must resume from the same step (a directory not shared by every rank, or a save
  // racing this load, would let them diverge).
  if (comm_->size() > 1) {
    std::array<std::int64_t, 2> mine{error ? 2 : (result ? 0 : 1),
                                     result ? static_cast<std::int64_t>(result->step) : -1};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(comm_->size()));
    comm_->allgather(BufferView::of(std::span<std::int64_t>(mine)),
                     BufferView::of(std::span<std::int64_t>(all)));
    if (error) std::rethrow_exception(error);
    std::string differ;
    for (int r = 0; r < comm_->size(); ++r) {
      const auto* x = &all[2 * static_cast<std::size_t>(r)];
      if (x[0] == mine[0] && x[1] == mine[1]) continue;
      differ += fmt::format("{}rank {}: {}", differ.empty() ? "" : ", ", r,
                            x[0] == 2   ? std::string("failed")
                            : x[0] == 1 ? std::string("no checkpoint")
                                        : fmt::format("step {}", x[1]));
    }
    if (!differ.empty())
      TANDEM_THROW(ErrorCode::Mismatch,
                   "checkpoint: this rank loaded {} from {} but {}: every rank must see the same "
                   "checkpoint directory",
                   result ? fmt::format("step {}", result->step) : std::string("nothing"),
                   dir_.string(), differ);
  }
  if (error) std::rethrow_exception(error);
  return result;
}

// ---- state from a peer --------------------------------------------------------------------

TrainingState share_state(Communicator& comm, int root, ::torch::nn::Module& module,
                          ::torch::optim::Optimizer& optimizer, const TrainingState& state) {
  TANDEM_CHECK_ARG(root >= 0 && root < comm.size(),
                   "share_state: root {} is not a rank of this communicator of {} ranks", root,
                   comm.size());
  // Root sends a checkpoint's bytes (without the RNG states): its length, then the bytes.
  std::string bytes;
  std::int64_t length = 0;
  std::string root_failure;
  if (comm.rank() == root) {
    try {
      json meta = to_json(state);
      meta["format"] = "tandem-state";
      bytes =
          encode(meta, archive_bytes([&](::torch::serialize::OutputArchive& a) { module.save(a); }),
                 archive_bytes([&](::torch::serialize::OutputArchive& a) { optimizer.save(a); }),
                 std::string());
      length = static_cast<std::int64_t>(bytes.size());
    } catch (const std::exception& e) {
      root_failure = e.what();
      length = -1;  // tells the others, which then fail too
    }
  }
  comm.broadcast(BufferView::raw(&length, 1, DataType::i64), root);
  if (!root_failure.empty())
    TANDEM_THROW(ErrorCode::InvalidArgument, "share_state: cannot serialize this rank's state: {}",
                 root_failure);
  if (length == -1)
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "share_state: rank {} could not serialize its state (its error says why)", root);
  if (length < 0 || static_cast<std::uint64_t>(length) > kHeaderBytes + kMaxPayload)
    TANDEM_THROW(ErrorCode::Mismatch, "share_state: rank {} announced a state of {} bytes", root,
                 length);
  bytes.resize(static_cast<std::size_t>(length));
  comm.broadcast(BufferView::raw(bytes.data(), bytes.size(), DataType::u8), root);

  // Every rank loads (root's objects already hold it), then all learn whether every rank
  // could: a rank whose model does not fit fails the call everywhere, not just on itself.
  TrainingState out = state;
  std::string failure;
  if (comm.rank() != root) {
    try {
      const Contents c = decode(bytes);
      out = state_from_json(c.meta);
      load_contents(c, module, optimizer);
    } catch (const std::exception& e) {
      failure = reason_of(e);
    }
  }
  std::int64_t failed = failure.empty() ? -1 : comm.rank();
  comm.allreduce(BufferView::raw(&failed, 1, DataType::i64), ReduceOp::max);
  if (!failure.empty())
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "share_state: the state of rank {} does not fit this rank's model or optimizer: "
                 "{}. Every rank must build the same model and optimizer",
                 root, failure);
  if (failed >= 0)
    TANDEM_THROW(ErrorCode::InvalidArgument,
                 "share_state: rank {} could not load the state of rank {} into its model or "
                 "optimizer (its error says why)",
                 failed, root);
  return out;
}

}  // namespace tandem::torch
