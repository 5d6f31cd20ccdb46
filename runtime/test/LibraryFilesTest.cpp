//===- LibraryFilesTest.cpp - Tests for bounded kernel-directory reads ----===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/LibraryFiles.h"
#include "smla/runtime/Error.h"

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <vector>

using namespace smla::runtime;

namespace {

class LibraryFiles : public ::testing::Test {
protected:
  void SetUp() override {
    const char *base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base ? base : "/tmp") + "/smla-files-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    ASSERT_NE(mkdtemp(buffer.data()), nullptr);
    dir_ = buffer.data();
  }
  void TearDown() override {
    for (const char *name :
         {"ok.cubin", "link.cubin", "zero.cubin", "fifo.cubin", "big.cubin",
          "out.cubin"})
      unlink((dir_ + "/" + name).c_str());
    rmdir((dir_ + "/sub").c_str());
    rmdir(dir_.c_str());
  }
  void write(const std::string &name, const std::string &bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
  }
  std::string dir_;
};

TEST_F(LibraryFiles, ReadsARegularFileInTheDirectory) {
  write("ok.cubin", std::string("abc\0def", 7));
  LibraryDirectory dir(dir_ + "/");
  EXPECT_EQ(dir.path(), dir_);
  EXPECT_EQ(dir.read("ok.cubin", 7, "the cubin"), std::string("abc\0def", 7));
  EXPECT_EQ(dir.pathOf("ok.cubin"), dir_ + "/ok.cubin");
}

TEST_F(LibraryFiles, RefusesWhatIsNotAPlainFileName) {
  EXPECT_TRUE(isPlainFileName("a.cubin"));
  for (std::string name : {std::string(""), std::string("."),
                           std::string(".."), std::string("sub/a.cubin"),
                           std::string("/etc/passwd"),
                           std::string("a\0b", 3)})
    EXPECT_FALSE(isPlainFileName(name)) << name;
  LibraryDirectory dir(dir_);
  EXPECT_EQ(SMLA_ERROR_MESSAGE(dir.read("../x.cubin", 10, "the cubin")),
            "smla: cannot read the cubin '" + dir_ +
                "/../x.cubin': not a file name in the directory");
}

TEST_F(LibraryFiles, RefusesSymbolicLinksDevicesAndFifos) {
  write("out.cubin", "outside");
  ASSERT_EQ(symlink((dir_ + "/out.cubin").c_str(),
                    (dir_ + "/link.cubin").c_str()),
            0);
  ASSERT_EQ(symlink("/dev/zero", (dir_ + "/zero.cubin").c_str()), 0);
  ASSERT_EQ(mkfifo((dir_ + "/fifo.cubin").c_str(), 0600), 0);
  ASSERT_EQ(mkdir((dir_ + "/sub").c_str(), 0700), 0);
  LibraryDirectory dir(dir_);
  for (const char *name : {"link.cubin", "zero.cubin"})
    EXPECT_EQ(SMLA_ERROR_MESSAGE(dir.read(name, 1 << 20, "the cubin", " of k")),
              "smla: cannot read the cubin '" + dir_ + "/" + name +
                  "' of k: a symbolic link (not followed)");
  // Refused without waiting for a writer.
  EXPECT_EQ(SMLA_ERROR_MESSAGE(dir.read("fifo.cubin", 10, "the cubin")),
            "smla: cannot read the cubin '" + dir_ +
                "/fifo.cubin': not a regular file");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(dir.read("sub", 10, "the cubin")),
            "smla: cannot read the cubin '" + dir_ +
                "/sub': not a regular file");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(dir.read("none.cubin", 10, "the cubin")),
            "smla: cannot read the cubin '" + dir_ +
                "/none.cubin': No such file or directory");
}

TEST_F(LibraryFiles, RefusesFilesAboveTheLimitBeforeReadingThem) {
  write("big.cubin", std::string(101, 'x'));
  LibraryDirectory dir(dir_);
  EXPECT_EQ(SMLA_ERROR_MESSAGE(dir.read("big.cubin", 100, "the cubin")),
            "smla: cannot read the cubin '" + dir_ +
                "/big.cubin': 101 bytes, more than the limit of 100");
  EXPECT_EQ(dir.read("big.cubin", 101, "the cubin").size(), 101u);
}

TEST_F(LibraryFiles, AMissingDirectoryIsNamed) {
  EXPECT_EQ(SMLA_ERROR_MESSAGE(LibraryDirectory(dir_ + "/none")),
            "smla: cannot open the kernel directory '" + dir_ +
                "/none': No such file or directory");
  write("ok.cubin", "x");
  EXPECT_EQ(SMLA_ERROR_MESSAGE(LibraryDirectory(dir_ + "/ok.cubin")),
            "smla: cannot open the kernel directory '" + dir_ +
                "/ok.cubin': Not a directory");
}

} // namespace
