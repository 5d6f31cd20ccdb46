//===- LibraryFiles.cpp - Reading a kernel directory, bounded -------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/LibraryFiles.h"

#include "smla/runtime/Error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace smla::runtime {

bool isPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

LibraryDirectory::LibraryDirectory(std::string path) : path_(std::move(path)) {
  if (path_.empty())
    path_ = ".";
  while (path_.size() > 1 && path_.back() == '/')
    path_.pop_back();
  if (path_.find('\0') == std::string::npos)
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  else
    errno = EINVAL;
  if (fd_ < 0)
    throw Error("smla: cannot open the kernel directory '" + path_ +
                "': " + std::strerror(errno));
}

LibraryDirectory::~LibraryDirectory() {
  if (fd_ >= 0)
    ::close(fd_);
}

std::string LibraryDirectory::pathOf(std::string_view name) const {
  return (path_ == "/" ? "" : path_) + "/" + std::string(name);
}

std::string LibraryDirectory::read(std::string_view name, size_t limit,
                                   const std::string &what,
                                   const std::string &suffix) const {
  const std::string shown = pathOf(name);
  auto fail = [&](const std::string &reason) {
    throw Error("smla: cannot read " + what + " '" + shown + "'" + suffix +
                ": " + reason);
  };
  if (!isPlainFileName(name))
    fail("not a file name in the directory");
  // O_NOFOLLOW: a symbolic link fails with ELOOP instead of being followed;
  // O_NONBLOCK: opening a FIFO does not wait for a writer (it is refused
  // below, like every file that is not regular).
  int fd = ::openat(fd_, std::string(name).c_str(),
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    fail(errno == ELOOP ? std::string("a symbolic link (not followed)")
                        : std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0)
    fail(std::strerror(errno));
  if (!S_ISREG(info.st_mode))
    fail("not a regular file");
  if (info.st_size < 0 || static_cast<uint64_t>(info.st_size) > limit)
    fail(std::to_string(info.st_size) + " bytes, more than the limit of " +
         std::to_string(limit));
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      fail(std::strerror(errno));
    if (n == 0)
      fail("the file shrank while it was read");
    done += static_cast<size_t>(n);
  }
  return bytes;
}

} // namespace smla::runtime
