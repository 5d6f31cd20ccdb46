//===- LibraryFiles.h - Reading a kernel directory, bounded -----*- C++ -*-===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// A kernel directory holds manifest.json and the cubins it names, each a
// plain file name in the directory (runtime/MANIFEST.md). Reading one is
// bounded: only regular files directly inside the directory are read (a
// name with '/', a NUL byte, "." or ".." is refused; a symbolic link is
// refused, not followed, so nothing outside the directory is reached; a
// FIFO or device is refused without blocking on it), and each file at most
// up to a size limit, checked before it is read.
//
//===----------------------------------------------------------------------===//

#ifndef SMLA_RUNTIME_LIBRARYFILES_H
#define SMLA_RUNTIME_LIBRARYFILES_H

#include <cstddef>
#include <string>
#include <string_view>

namespace smla::runtime {

/// The most bytes of manifest.json read (a library of a thousand kernels
/// takes about 2 MiB).
inline constexpr size_t kMaxManifestBytes = size_t(4) << 20;
/// The most bytes of one cubin read (the library's largest are ~1 MiB).
inline constexpr size_t kMaxCubinBytes = size_t(64) << 20;

/// Whether `name` names a file directly inside a directory: non-empty, no
/// '/', no NUL byte, not "." or "..".
bool isPlainFileName(std::string_view name);

/// An open kernel directory (the directory itself may be reached through a
/// symbolic link: it is the one the caller chose).
class LibraryDirectory {
public:
  /// Opens `path`; throws Error naming it if it is not a readable
  /// directory.
  explicit LibraryDirectory(std::string path);
  ~LibraryDirectory();
  LibraryDirectory(const LibraryDirectory &) = delete;
  LibraryDirectory &operator=(const LibraryDirectory &) = delete;

  const std::string &path() const { return path_; }
  /// path() + "/" + name.
  std::string pathOf(std::string_view name) const;

  /// The bytes of the regular file `name` in the directory, which must be
  /// a plain file name and hold at most `limit` bytes. Throws Error
  /// "smla: cannot read WHAT 'PATH'SUFFIX: REASON" otherwise.
  std::string read(std::string_view name, size_t limit, const std::string &what,
                   const std::string &suffix = "") const;

private:
  std::string path_;
  int fd_ = -1;
};

} // namespace smla::runtime

#endif // SMLA_RUNTIME_LIBRARYFILES_H
