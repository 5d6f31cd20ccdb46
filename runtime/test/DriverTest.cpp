//===- DriverTest.cpp - Tests for loading the CUDA driver -----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//

#include "smla/runtime/Driver.h"
#include "smla/runtime/Error.h"

#include "FakeDriver.h"
#include "TestSupport.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace smla::runtime;
using namespace smla::runtime::test;

namespace {

TEST(Driver, MissingLibraryIsAClearError) {
  EXPECT_EQ(SMLA_ERROR_MESSAGE(loadDriver("libsmla-no-such-driver.so.1")),
            "smla: the CUDA driver is not available: "
            "dlopen(\"libsmla-no-such-driver.so.1\") failed: "
            "libsmla-no-such-driver.so.1: cannot open shared object file: No "
            "such file or directory. The smla runtime needs an NVIDIA GPU with "
            "its driver installed");
}

TEST(Driver, LibraryWithoutTheEntryPointsIsAClearError) {
  // libdl/libc are present everywhere and export no CUDA symbols.
  std::string message = SMLA_ERROR_MESSAGE(loadDriver("libc.so.6"));
  EXPECT_EQ(message, "smla: the CUDA driver 'libc.so.6' has no entry point "
                     "cuInit; the runtime needs a driver for CUDA 12.0 or "
                     "newer");
}

TEST(Driver, SystemDriverAbsentGivesTheDocumentedError) {
  if (void *handle = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL)) {
    dlclose(handle);
    GTEST_SKIP() << kDriverLibrary << " is present on this machine";
  }
  std::string first = SMLA_ERROR_MESSAGE(systemDriver());
  EXPECT_EQ(first.rfind("smla: the CUDA driver is not available: "
                        "dlopen(\"libcuda.so.1\") failed: libcuda.so.1: ",
                        0),
            0u)
      << first;
  // The failure is remembered and reported on every call.
  EXPECT_EQ(SMLA_ERROR_MESSAGE(systemDriver()), first);
}

TEST(Driver, ResolvesEveryEntryPointOfTheToolkitStub) {
  // The toolkit's stub libcuda exports the whole API and fails every call,
  // which exercises the cuGetProcAddress_v2 path without a GPU. Its soname is
  // libcuda.so.1, so it is loaded in a child process: once loaded, it would
  // satisfy later dlopen("libcuda.so.1") calls in this one.
  const char *stub = SMLA_TEST_CUDA_STUB;
  if (access(stub, R_OK) != 0)
    GTEST_SKIP() << "no CUDA stub library at " << stub;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int status = 0;
    try {
      DriverApi api = loadDriver(stub);
      for (void *entry :
           {(void *)api.init, (void *)api.deviceGet, (void *)api.ctxGetCurrent,
            (void *)api.ctxGetDevice, (void *)api.devicePrimaryCtxRetain,
            (void *)api.ctxSetCurrent, (void *)api.moduleLoadData,
            (void *)api.moduleGetFunction, (void *)api.funcSetAttribute,
            (void *)api.launchKernelEx, (void *)api.getErrorName,
            (void *)api.getErrorString, (void *)api.moduleUnload})
        if (!entry)
          status = 2;
      if (api.init(0) == CUDA_SUCCESS) // the stub never succeeds
        status = 3;
    } catch (const Error &) {
      status = 1;
    }
    _exit(status);
  }
  int status = -1;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: loadDriver threw, 2: an entry point is null, 3: cuInit succeeded";
}

TEST(Driver, ErrorTextUsesTheDriversNames) {
  FakeDriver fake;
  DriverApi api = fake.api();
  EXPECT_EQ(cudaErrorText(api, CUDA_ERROR_INVALID_IMAGE),
            "CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)");
  EXPECT_EQ(cudaErrorText(api, CUresult(999)), "CUDA error 999 (unknown)");
  EXPECT_EQ(cudaErrorText(DriverApi{}, CUDA_ERROR_NO_DEVICE),
            "CUDA error 100 (unknown)");
}

} // namespace
