// The OTLP exporter's outage buffer (src/export/export_buffer.*): order across memory and spool,
// its two bounds, the spool's files, and its settings.
#include "export/export_buffer.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "scoped_env.hpp"
#include "nemo/lens/config.hpp"
#include "nemo/lens/errors.hpp"

namespace {

using nemo::lens::ConfigError;
using nemo::lens::NemoLensConfig;
using nemo::lens::detail::ExportBuffer;
using nemo::lens::detail::ExportBufferSettings;

// A fresh directory of this user, mode 0700, removed with what is in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "lens_spool_XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() { (void)std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  // The names of the entries in the directory.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
      }
      ::closedir(d);
    }
    return names;
  }

 private:
  std::string path_;
};

std::string body(char c, std::size_t n) { return std::string(n, c); }

// Pops every request, returning the first byte of each and the items.
std::vector<std::pair<char, std::uint64_t>> drain(ExportBuffer& buffer) {
  std::vector<std::pair<char, std::uint64_t>> out;
  while (!buffer.empty()) {
    const std::string* b = buffer.front();
    EXPECT_NE(b, nullptr);
    if (b == nullptr) break;
    out.emplace_back(b->empty() ? '\0' : (*b)[0], buffer.front_items());
    buffer.pop();
  }
  return out;
}

TEST(ExportBuffer, KeepsOrderAcrossMemoryAndSpoolAndFreesBoth) {
  TempDir dir;
  ExportBuffer buffer(ExportBufferSettings{.memory_bytes = 250, .spool_dir = dir.path(),
                                           .spool_bytes = 1000});
  // a, b in memory (200 bytes); c, d do not fit there: spooled; once a is sent, e fits in memory
  // again, and still leaves after d.
  for (char c : {'a', 'b', 'c', 'd'}) {
    std::string b = body(c, 100);
    ASSERT_TRUE(buffer.push(b, static_cast<std::uint64_t>(c - 'a' + 1))) << c;
    EXPECT_TRUE(b.empty()) << "the buffer takes the body";
  }
  EXPECT_EQ(buffer.memory_bytes(), 200u);
  EXPECT_EQ(buffer.spool_bytes(), 200u);
  EXPECT_EQ(buffer.items(), 1u + 2 + 3 + 4);
  ASSERT_NE(buffer.front(), nullptr);
  EXPECT_EQ(*buffer.front(), body('a', 100));
  buffer.pop();
  std::string e = body('e', 100);
  ASSERT_TRUE(buffer.push(e, 5));
  EXPECT_EQ(buffer.memory_bytes(), 200u);
  const auto order = drain(buffer);
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], std::make_pair('b', std::uint64_t{2}));
  EXPECT_EQ(order[1], std::make_pair('c', std::uint64_t{3}));
  EXPECT_EQ(order[2], std::make_pair('d', std::uint64_t{4}));
  EXPECT_EQ(order[3], std::make_pair('e', std::uint64_t{5}));
  EXPECT_EQ(buffer.memory_bytes(), 0u);
  EXPECT_EQ(buffer.spool_bytes(), 0u) << "a spool read to its end starts over";
  EXPECT_EQ(buffer.items(), 0u);
}

TEST(ExportBuffer, RefusesWhatFitsNeitherBoundAndKeepsWhatItHas) {
  TempDir dir;
  ExportBuffer buffer(ExportBufferSettings{.memory_bytes = 100, .spool_dir = dir.path(),
                                           .spool_bytes = 150});
  std::string a = body('a', 100), b = body('b', 100), c = body('c', 100);
  ASSERT_TRUE(buffer.push(a, 1));
  ASSERT_TRUE(buffer.push(b, 1));   // spooled: 100 of 150
  EXPECT_FALSE(buffer.push(c, 1));  // 200 > 150
  EXPECT_EQ(c, body('c', 100)) << "a refused body stays the caller's";
  EXPECT_EQ(buffer.items(), 2u);
  const auto order = drain(buffer);
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[1].first, 'b');
}

TEST(ExportBuffer, TheFirstRequestAlwaysFitsAndNoSpoolMeansMemoryOnly) {
  ExportBuffer buffer(ExportBufferSettings{.memory_bytes = 0, .spool_dir = "", .spool_bytes = 0});
  std::string big = body('x', 4096), next = body('y', 1);
  ASSERT_TRUE(buffer.push(big, 7)) << "the request being sent always has a place";
  EXPECT_FALSE(buffer.push(next, 1));
  EXPECT_EQ(buffer.clear(), 7u);
  EXPECT_TRUE(buffer.empty());
}

TEST(ExportBuffer, SpoolFilesHaveNoNameAndRollOver) {
  TempDir dir;
  // Segments of at least 1 MiB: 3 MiB of 512 KiB requests take several files, none visible.
  ExportBuffer buffer(ExportBufferSettings{.memory_bytes = 0, .spool_dir = dir.path(),
                                           .spool_bytes = std::uint64_t{8} << 20});
  std::string first = body('0', 1);
  ASSERT_TRUE(buffer.push(first, 1));
  for (int i = 0; i < 6; ++i) {
    std::string b = body(static_cast<char>('a' + i), 512 << 10);
    ASSERT_TRUE(buffer.push(b, 1)) << buffer.spool_error();
  }
  EXPECT_EQ(buffer.spool_bytes(), std::uint64_t{3} << 20);
  EXPECT_GE(buffer.spool_files(), 2u);
  EXPECT_TRUE(dir.entries().empty()) << "spool files are unnamed: a crash leaves nothing behind";
  const auto order = drain(buffer);
  ASSERT_EQ(order.size(), 7u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i) + 1].first, 'a' + i);
  EXPECT_EQ(buffer.spool_bytes(), 0u);
  EXPECT_LE(buffer.spool_files(), 1u) << "files read to their end are closed";
}

TEST(ExportBuffer, AnUnwritableSpoolDirectoryRefusesWithWhy) {
  ExportBuffer buffer(ExportBufferSettings{.memory_bytes = 0,
                                           .spool_dir = "/nonexistent/lens-spool",
                                           .spool_bytes = 1 << 20});
  std::string a = body('a', 10), b = body('b', 10);
  ASSERT_TRUE(buffer.push(a, 1));
  EXPECT_FALSE(buffer.push(b, 1));
  EXPECT_NE(buffer.spool_error().find("/nonexistent/lens-spool"), std::string::npos)
      << buffer.spool_error();
}

TEST(ExportBufferSettings, SizesAndTheSpoolComeFromThePrefixedVariables) {
  TempDir dir;
  lens_test::ScopedEnv env;
  env.set("NEMO_LENS_EXPORT_BUFFER_SIZE", "3MiB");
  env.set("NEMO_LENS_EXPORT_SPOOL_SIZE", "2 g");
  env.set("NEMO_LENS_EXPORT_SPOOL_DIR", dir.path() + "/spool");
  const ExportBufferSettings s = nemo::lens::detail::export_buffer_settings(NemoLensConfig::from_env());
  EXPECT_EQ(s.memory_bytes, std::uint64_t{3} << 20);
  EXPECT_EQ(s.spool_bytes, std::uint64_t{2} << 30);
  EXPECT_EQ(s.spool_dir, dir.path() + "/spool");
  struct stat st {};
  ASSERT_EQ(::stat(s.spool_dir.c_str(), &st), 0) << "created at set-up";
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  env.set("NEMO_LENS_EXPORT_SPOOL_DIR", "OFF");
  EXPECT_TRUE(nemo::lens::detail::export_buffer_settings(NemoLensConfig::from_env()).spool_dir.empty());
  env.unset("NEMO_LENS_EXPORT_SPOOL_DIR");
  env.set("NEMO_LENS_EXPORT_SPOOL_SIZE", "0");
  EXPECT_TRUE(nemo::lens::detail::export_buffer_settings(NemoLensConfig::from_env()).spool_dir.empty());
}

TEST(ExportBufferSettings, DefaultsAreDocumented) {
  TempDir dir;
  lens_test::ScopedEnv env;
  env.set("TMPDIR", dir.path());
  const ExportBufferSettings s = nemo::lens::detail::export_buffer_settings(NemoLensConfig::from_env());
  EXPECT_EQ(s.memory_bytes, std::uint64_t{64} << 20);
  EXPECT_EQ(s.spool_bytes, std::uint64_t{1} << 30);
  EXPECT_EQ(s.spool_dir, dir.path() + "/lens-spool-" + std::to_string(::geteuid()));
}

TEST(ExportBufferSettings, BadValuesNameTheVariableAndWhatIsValid) {
  TempDir dir;
  lens_test::ScopedEnv env;
  env.set("NEMO_LENS_EXPORT_SPOOL_DIR", dir.path());
  for (const char* bad : {"lots", "-1", "12 parsecs", "99999999999TiB"}) {
    env.set("NEMO_LENS_EXPORT_BUFFER_SIZE", bad);
    try {
      nemo::lens::detail::export_buffer_settings(NemoLensConfig::from_env());
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("NEMO_LENS_EXPORT_BUFFER_SIZE"), std::string::npos) << what;
      EXPECT_NE(what.find(bad), std::string::npos) << what;
      EXPECT_NE(what.find("MiB"), std::string::npos) << what;
    }
  }
}

TEST(ExportBufferSettings, ASpoolDirectoryOthersCanEnterIsRefused) {
  TempDir dir;
  const std::string open_dir = dir.path() + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  lens_test::ScopedEnv env;
  env.set("NEMO_LENS_EXPORT_SPOOL_DIR", open_dir);
  try {
    nemo::lens::detail::export_buffer_settings(NemoLensConfig::from_env());
    ADD_FAILURE() << "a mode 777 spool directory was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NEMO_LENS_EXPORT_SPOOL_DIR"), std::string::npos) << what;
    EXPECT_NE(what.find("mode 0777"), std::string::npos) << what;
  }
  // The default directory, when another user owns it, only turns the spool off.
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root";
  env.unset("NEMO_LENS_EXPORT_SPOOL_DIR");
  env.set("TMPDIR", dir.path());
  const std::string theirs = dir.path() + "/lens-spool-0";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);  // nobody
  ::testing::internal::CaptureStderr();
  const ExportBufferSettings s = nemo::lens::detail::export_buffer_settings(NemoLensConfig::from_env());
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(s.spool_dir.empty());
  EXPECT_NE(printed.find("belongs to uid 65534"), std::string::npos) << printed;
  EXPECT_NE(printed.find("NEMO_LENS_EXPORT_SPOOL_DIR"), std::string::npos) << printed;
}

}  // namespace
