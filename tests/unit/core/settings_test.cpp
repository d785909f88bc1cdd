// The settings table: getters, parsing, and the two checks that keep documentation and code
// in step (README table == settings::all(); every TANDEM_* name in the sources is declared).

#include "support/scoped_env.hpp"

#include <tandem/error.hpp>
#include <tandem/settings.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tandem::settings {
namespace {

using testing::ScopedEnv;

std::string_view type_name(Type t) {
  switch (t) {
    case Type::boolean:
      return "boolean";
    case Type::integer:
      return "integer";
    case Type::seconds:
      return "seconds";
    case Type::bytes:
      return "bytes";
    case Type::string:
      return "string";
    case Type::choice:
      return "choice";
  }
  return "?";
}

struct Row {
  std::string name, type, default_value, description;
  friend bool operator==(const Row&, const Row&) = default;
};

std::ostream& operator<<(std::ostream& os, const Row& r) {
  return os << "| `" << r.name << "` | " << r.type << " | "
            << (r.default_value.empty() ? "—" : r.default_value) << " | " << r.description << " |";
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<Row> declared_rows() {
  std::vector<Row> rows;
  for (const Setting& s : all())
    rows.push_back({std::string(s.name), std::string(type_name(s.type)),
                    std::string(s.default_value), std::string(s.description)});
  return rows;
}

// Rows of the README's settings table, between the settings:begin/end markers.
std::vector<Row> readme_rows() {
  std::ifstream in(TANDEM_SOURCE_DIR "/README.md");
  EXPECT_TRUE(in.good()) << "cannot read " TANDEM_SOURCE_DIR "/README.md";
  std::vector<Row> rows;
  bool inside = false, seen_end = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find("<!-- settings:begin -->") != std::string::npos) {
      inside = true;
      continue;
    }
    if (line.find("<!-- settings:end -->") != std::string::npos) {
      seen_end = true;
      break;
    }
    if (!inside || trim(line).empty() || trim(line).front() != '|') continue;
    std::vector<std::string> cells;
    std::stringstream ss(trim(line).substr(1));
    for (std::string cell; std::getline(ss, cell, '|');) cells.push_back(trim(cell));
    if (cells.size() != 4) {
      ADD_FAILURE() << "README settings row does not have 4 cells: " << line;
      continue;
    }
    if (cells[0] == "Variable" || cells[0].starts_with("---") || cells[0].starts_with(":--"))
      continue;  // header and separator
    std::string name = cells[0];
    if (name.size() >= 2 && name.front() == '`' && name.back() == '`')
      name = name.substr(1, name.size() - 2);
    const std::string def = cells[2] == "—" ? std::string() : cells[2];
    rows.push_back({name, cells[1], def, cells[3]});
  }
  EXPECT_TRUE(inside && seen_end) << "README.md lacks the settings:begin/end markers";
  return rows;
}

std::string expected_section() {
  std::ostringstream os;
  os << "| Variable | Type | Default | Description |\n|---|---|---|---|\n";
  for (const Row& r : declared_rows()) os << r << "\n";
  return os.str();
}

TEST(Settings, ReadmeTableMatchesTheDeclaredTable) {
  const auto readme = readme_rows();
  const auto declared = declared_rows();
  for (const Row& r : declared)
    EXPECT_NE(std::find(readme.begin(), readme.end(), r), readme.end())
        << "declared but not documented (or documented differently) in README.md:\n"
        << r;
  for (const Row& r : readme)
    EXPECT_NE(std::find(declared.begin(), declared.end(), r), declared.end())
        << "documented in README.md but not declared in src/core/settings.cpp:\n"
        << r;
  EXPECT_EQ(readme, declared) << "README.md settings section should read:\n" << expected_section();
}

TEST(Settings, TableIsSortedUniqueAndWellFormed) {
  const auto table = all();
  ASSERT_FALSE(table.empty());
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_TRUE(table[i].name.starts_with("TANDEM_")) << table[i].name;
    EXPECT_FALSE(table[i].description.empty()) << table[i].name;
    EXPECT_EQ(table[i].description.find('|'), std::string_view::npos) << table[i].name;
    if (i > 0) {
      EXPECT_LT(table[i - 1].name, table[i].name);
    }
    EXPECT_EQ(&find(table[i].name), &table[i]);
  }
}

TEST(Settings, DeclaresExactlyTheDocumentedNamesTypesAndDefaults) {
  const std::map<std::string, std::pair<Type, std::string>> want{
      {"TANDEM_DEBUG", {Type::choice, "WARN"}},
      {"TANDEM_DEBUG_SUBSYS", {Type::string, "ALL"}},
      {"TANDEM_STREAM_BYTES", {Type::bytes, "0"}},
      {"TANDEM_TIMEOUT", {Type::seconds, "600"}},
      {"TANDEM_ALGO", {Type::string, ""}},
      {"TANDEM_SOCKET_IFNAME", {Type::string, ""}},
      {"TANDEM_BUFFSIZE", {Type::string, "auto"}},
      {"TANDEM_CHUNK_SIZE", {Type::bytes, "1M"}},
      {"TANDEM_CMA", {Type::boolean, "1"}},
      {"TANDEM_CUDA_LIBRARY", {Type::string, ""}},
      {"TANDEM_GPU_TRANSPORT", {Type::choice, "auto"}},
      {"TANDEM_JOIN", {Type::boolean, "0"}},
      {"TANDEM_SHM_DISABLE", {Type::boolean, "0"}},
      {"TANDEM_SOCKETS_PER_PEER", {Type::integer, "1"}},
      {"TANDEM_SPIN_US", {Type::string, "auto"}},
      {"TANDEM_STALL_WARN", {Type::seconds, "60"}},
      {"TANDEM_STORE_TOKEN", {Type::string, ""}},
      {"TANDEM_STORE_ADDR", {Type::string, ""}},
      {"TANDEM_RUN_ID", {Type::string, ""}},
      {"TANDEM_RESTART_COUNT", {Type::integer, "0"}},
      {"TANDEM_PYTHON", {Type::string, ""}},
      {"TANDEM_TRACE", {Type::string, ""}},
      {"TANDEM_TRACE_EVENTS", {Type::integer, "100000"}},
      {"TANDEM_TRANSPORT", {Type::string, "auto"}},
      {"TANDEM_TUNING_FILE", {Type::string, ""}},
  };
  std::map<std::string, std::pair<Type, std::string>> got;
  for (const Setting& s : all()) got[std::string(s.name)] = {s.type, std::string(s.default_value)};
  EXPECT_EQ(got, want);
}

// The contents of the string literals of a C++ source (comments and character literals
// skipped; raw strings understood). Deliberately simple: it only has to be right for our code.
std::vector<std::string> string_literals(const std::string& src) {
  std::vector<std::string> out;
  const std::size_t n = src.size();
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  // R"delim( ... )delim", possibly with an encoding prefix (u8R, uR, UR, LR).
  auto raw_start = [&](std::size_t i) {
    if (i == 0 || src[i - 1] != 'R') return false;
    if (i < 2 || !ident(src[i - 2])) return true;
    return std::string_view("8uUL").find(src[i - 2]) != std::string_view::npos;
  };
  for (std::size_t i = 0; i < n; ++i) {
    const char c = src[i];
    if (c == '/' && i + 1 < n && src[i + 1] == '/') {
      i = src.find('\n', i);
      if (i == std::string::npos) break;
    } else if (c == '/' && i + 1 < n && src[i + 1] == '*') {
      i = src.find("*/", i + 2);
      if (i == std::string::npos) break;
      ++i;
    } else if (c == '\'') {
      if (i > 0 && std::isxdigit(static_cast<unsigned char>(src[i - 1]))) continue;  // 1'000
      for (++i; i < n && src[i] != '\''; ++i)
        if (src[i] == '\\') ++i;
    } else if (c == '"' && raw_start(i)) {
      const std::size_t open = src.find('(', i);
      if (open == std::string::npos) break;
      const std::string close = ")" + src.substr(i + 1, open - i - 1) + "\"";
      const std::size_t end = src.find(close, open);
      if (end == std::string::npos) break;
      out.push_back(src.substr(open + 1, end - open - 1));
      i = end + close.size() - 1;
    } else if (c == '"') {
      std::string lit;
      for (++i; i < n && src[i] != '"' && src[i] != '\n'; ++i) {
        if (src[i] == '\\' && i + 1 < n) lit.push_back(src[i++]);
        lit.push_back(src[i]);
      }
      out.push_back(std::move(lit));
    }
  }
  return out;
}

// TANDEM_X names in a piece of text: "TANDEM_" + [A-Z0-9_], not preceded by an identifier
// character, trailing underscores dropped (a bare "TANDEM_" prefix is not a name).
std::vector<std::string> tandem_names(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t pos = text.find("TANDEM_"); pos != std::string::npos;
       pos = text.find("TANDEM_", pos + 1)) {
    if (pos > 0 &&
        (std::isalnum(static_cast<unsigned char>(text[pos - 1])) || text[pos - 1] == '_'))
      continue;
    std::size_t end = pos + 7;
    while (end < text.size() &&
           (std::isupper(static_cast<unsigned char>(text[end])) ||
            std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '_'))
      ++end;
    while (end > pos + 7 && text[end - 1] == '_') --end;
    if (end > pos + 7) out.push_back(text.substr(pos, end - pos));
  }
  return out;
}

TEST(Settings, SourceScannerFindsNamesInLiteralsOnly) {
  const std::string src = R"src(
    // "TANDEM_IN_COMMENT"
    /* "TANDEM_IN_BLOCK" */
    char q = '"'; int big = 1'000;
    auto a = get_bool("TANDEM_SHM_DISABLE");
    auto b = fmt::format("set TANDEM_TIMEOUT={} or XTANDEM_NOT", 1);
    auto c = R"x(raw "TANDEM_RAW" )x";
    auto d = "TANDEM_" + std::string("prefix only");
    TANDEM_CHECK(x, "macro names outside literals are not settings");
  )src";
  std::vector<std::string> names;
  for (const auto& lit : string_literals(src))
    for (auto& n : tandem_names(lit)) names.push_back(n);
  EXPECT_EQ(names,
            (std::vector<std::string>{"TANDEM_SHM_DISABLE", "TANDEM_TIMEOUT", "TANDEM_RAW"}));
}

// Every "TANDEM_X" inside a string literal of src/, include/ or tools/ names a declared
// setting: code cannot read (or tell users to set) a variable the README does not document.
TEST(Settings, EveryNameInTheSourcesIsDeclared) {
  namespace fs = std::filesystem;
  std::set<std::string> declared;
  for (const Setting& s : all()) declared.insert(std::string(s.name));
  std::size_t files = 0, names = 0;
  for (const char* dir : {"src", "include", "tools"}) {
    const fs::path root = fs::path(TANDEM_SOURCE_DIR) / dir;
    if (!fs::exists(root)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
      const auto ext = entry.path().extension();
      if (!entry.is_regular_file() ||
          (ext != ".cpp" && ext != ".hpp" && ext != ".h" && ext != ".cc"))
        continue;
      ++files;
      std::ifstream in(entry.path());
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      for (const auto& lit : string_literals(text))
        for (const auto& name : tandem_names(lit)) {
          ++names;
          EXPECT_TRUE(declared.contains(name))
              << name << " is used in " << fs::relative(entry.path(), TANDEM_SOURCE_DIR).string()
              << " but not declared in src/core/settings.cpp (and the README table)";
        }
    }
  }
  EXPECT_GT(files, 0u);
  EXPECT_GT(names, 0u) << "the scan found no TANDEM_* names at all: is the scanner broken?";
}

// ---- getters ------------------------------------------------------------------------------

TEST(Settings, UnsetOrEmptyGivesTheDefault) {
  {
    ScopedEnv e("TANDEM_TIMEOUT", nullptr);
    EXPECT_EQ(get_seconds("TANDEM_TIMEOUT"), std::chrono::seconds(600));
    EXPECT_EQ(get_string("TANDEM_TIMEOUT"), "600");
  }
  {
    ScopedEnv e("TANDEM_CHUNK_SIZE", "");
    EXPECT_EQ(get_bytes("TANDEM_CHUNK_SIZE"), 1u << 20);
  }
  ScopedEnv e("TANDEM_ALGO", nullptr);
  EXPECT_EQ(get_string("TANDEM_ALGO"), "");
}

TEST(Settings, UndeclaredNameIsAnInternalError) {
  try {
    (void)get_string("TANDEM_NO_SUCH_THING");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Internal);
    EXPECT_NE(e.message().find("TANDEM_NO_SUCH_THING"), std::string::npos);
  }
  EXPECT_THROW((void)find("TANDEM_"), Error);
}

TEST(Settings, Booleans) {
  for (const char* yes : {"1", "true", "TRUE", "Yes", "on", " on "}) {
    ScopedEnv e("TANDEM_SHM_DISABLE", yes);
    EXPECT_TRUE(get_bool("TANDEM_SHM_DISABLE")) << yes;
  }
  for (const char* no : {"0", "false", "No", "OFF"}) {
    ScopedEnv e("TANDEM_SHM_DISABLE", no);
    EXPECT_FALSE(get_bool("TANDEM_SHM_DISABLE")) << no;
  }
  ScopedEnv e("TANDEM_SHM_DISABLE", "maybe");
  try {
    (void)get_bool("TANDEM_SHM_DISABLE");
    FAIL() << "expected an Error";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(err.message().find("TANDEM_SHM_DISABLE='maybe'"), std::string::npos) << err.what();
    EXPECT_NE(err.message().find("TANDEM_SHM_DISABLE=1"), std::string::npos) << err.what();
  }
}

TEST(Settings, Integers) {
  {
    ScopedEnv e("TANDEM_TRACE_EVENTS", "123");
    EXPECT_EQ(get_int("TANDEM_TRACE_EVENTS"), 123);
  }
  {
    ScopedEnv e("TANDEM_TRACE_EVENTS", "-7");
    EXPECT_EQ(get_int("TANDEM_TRACE_EVENTS"), -7);
  }
  EXPECT_EQ(get_int("TANDEM_SOCKETS_PER_PEER"), 1);
  for (const char* bad : {"12x", "1.5", "abc", "99999999999999999999"}) {
    ScopedEnv e("TANDEM_TRACE_EVENTS", bad);
    try {
      (void)get_int("TANDEM_TRACE_EVENTS");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(
          err.message().find(std::string("TANDEM_TRACE_EVENTS='") + bad + "' is not an integer"),
          std::string::npos)
          << err.what();
    }
  }
}

TEST(Settings, Seconds) {
  {
    ScopedEnv e("TANDEM_TIMEOUT", "0.5");
    EXPECT_EQ(get_seconds("TANDEM_TIMEOUT"), std::chrono::milliseconds(500));
  }
  {
    ScopedEnv e("TANDEM_TIMEOUT", "30s");
    EXPECT_EQ(get_seconds("TANDEM_TIMEOUT"), std::chrono::seconds(30));
  }
  {
    ScopedEnv e("TANDEM_TIMEOUT", "1e300");
    EXPECT_EQ(get_seconds("TANDEM_TIMEOUT"), std::chrono::nanoseconds::max());
  }
  for (const char* bad : {"abc", "-1", "10 minutes", "nan", "inf"}) {
    ScopedEnv e("TANDEM_TIMEOUT", bad);
    try {
      (void)get_seconds("TANDEM_TIMEOUT");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(err.message().find(std::string("TANDEM_TIMEOUT='") + bad +
                                   "' is not a number of seconds (example: TANDEM_TIMEOUT=600)"),
                std::string::npos)
          << err.what();
    }
  }
}

TEST(Settings, ParseBytes) {
  EXPECT_EQ(parse_bytes("100"), 100u);
  EXPECT_EQ(parse_bytes("0"), 0u);
  EXPECT_EQ(parse_bytes("128K"), 128u << 10);
  EXPECT_EQ(parse_bytes("128k"), 128u << 10);
  EXPECT_EQ(parse_bytes("4M"), 4u << 20);
  EXPECT_EQ(parse_bytes("4MiB"), 4u << 20);
  EXPECT_EQ(parse_bytes("4MB"), 4u << 20);
  EXPECT_EQ(parse_bytes("1G"), 1u << 30);
  EXPECT_EQ(parse_bytes("2T"), std::uint64_t{2} << 40);
  EXPECT_EQ(parse_bytes("64B"), 64u);
  EXPECT_EQ(parse_bytes(" 8 M "), 8u << 20);
  EXPECT_EQ(parse_bytes("1.5M"), 3u << 19);
  EXPECT_EQ(parse_bytes(".5K"), 512u);
  EXPECT_EQ(parse_bytes("0.3K"), 307u);  // rounded down to whole bytes
  EXPECT_EQ(parse_bytes("18446744073709551615"), 18446744073709551615u);
  for (const char* bad : {"", "M", "-1", "1.5", "1.5B", "4X", "4MM", "1.", "1..5M",
                          "18446744073709551616", "16777216T", "0x10", "4 M B x"})
    EXPECT_EQ(parse_bytes(bad), std::nullopt) << bad;
}

TEST(Settings, BytesGetterNamesTheVariable) {
  ScopedEnv e("TANDEM_CHUNK_SIZE", "lots");
  try {
    (void)get_bytes("TANDEM_CHUNK_SIZE");
    FAIL() << "expected an Error";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(err.message().find("TANDEM_CHUNK_SIZE='lots' is not a byte count"), std::string::npos)
        << err.what();
    EXPECT_NE(err.message().find("TANDEM_CHUNK_SIZE=1M"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace tandem::settings
