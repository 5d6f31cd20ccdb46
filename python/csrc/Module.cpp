//===- Module.cpp - The smla._C module and the op's schema ----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Importing smla._C registers torch.ops.smla.sparse_mla_bwd (the schema here,
// the CUDA/CPU/Meta implementations in SparseMlaBwd.cpp) through static
// initializers. The Python module itself is a plain C-API module with one
// helper, so it needs neither pybind11 nor libtorch_python.
//
//===----------------------------------------------------------------------===//

#include "KernelChoice.h"
#include "KernelDirectory.h"

#include "smla/runtime/Error.h"

#include <Python.h>
#include <torch/library.h>

// The schema python/smla/_compiled.py calls; keep the two in sync.
TORCH_LIBRARY(smla, m) {
  m.def("sparse_mla_bwd(Tensor q, Tensor kv, Tensor o, Tensor dout, "
        "Tensor indices, Tensor lse, float sm_scale, bool lse_base_e, "
        "Tensor? q_positions, Tensor? delta, ScalarType dq_dtype, "
        "ScalarType dkv_dtype) -> (Tensor dq, Tensor dkv, Tensor counters)");
  // The aligned index rows of token pairs that sparse_mla_bwd runs the
  // folded kernel on (TokenPairs.h); exposed for tests and inspection.
  m.def("aligned_pair_rows(Tensor indices, int s_kv) -> "
        "(Tensor rows, int slots, bool duplicate)");
}

namespace {

using smla::ext::LoadedLibrary;

/// Runs `body`, turning a runtime or torch error into a Python
/// RuntimeError; returns nullptr then.
template <typename F> PyObject *guarded(F &&body) {
  try {
    return body();
  } catch (const smla::runtime::Error &error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  } catch (const c10::Error &error) {
    PyErr_SetString(PyExc_RuntimeError, error.what_without_backtrace());
  }
  return nullptr;
}

PyObject *kernelDirectory(PyObject *, PyObject *) {
  return guarded([] {
    return PyUnicode_DecodeFSDefault(smla::ext::kernelDirectory().c_str());
  });
}

/// A method taking one path and returning None, calling `Set`.
template <void (*Set)(const std::string &)>
PyObject *withDirectory(PyObject *, PyObject *args) {
  const char *directory = nullptr;
  if (!PyArg_ParseTuple(args, "s", &directory))
    return nullptr;
  return guarded([&] {
    Set(directory);
    Py_RETURN_NONE;
  });
}

PyObject *kernels(PyObject *, PyObject *) {
  return guarded([]() -> PyObject * {
    PyObject *list = PyList_New(0);
    for (const LoadedLibrary &library : smla::ext::kernelLibraries()) {
      const smla::runtime::Manifest &manifest = library.library->manifest();
      for (const smla::runtime::KernelEntry &kernel : manifest.kernels) {
        PyObject *item = Py_BuildValue(
            "{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "name", kernel.name.c_str(),
            "kind", kernel.kind.c_str(), "config", kernel.config.str().c_str(),
            "directory", library.directory.c_str(), "target",
            manifest.target.c_str(), "compiler", kernel.compiler.c_str(),
            "spec", kernel.spec.c_str());
        if (item == nullptr || PyList_Append(list, item) != 0) {
          Py_XDECREF(item);
          Py_DECREF(list);
          return nullptr;
        }
        Py_DECREF(item);
      }
    }
    return list;
  });
}

PyObject *checkLibrary(PyObject *, PyObject *args) {
  int device = -1;
  if (!PyArg_ParseTuple(args, "i", &device))
    return nullptr;
  return guarded([&] {
    std::vector<LoadedLibrary> libraries = smla::ext::kernelLibraries();
    if (device >= 0)
      smla::ext::checkDeviceTarget(libraries.front(), device);
    Py_RETURN_NONE;
  });
}

PyObject *findKernel(PyObject *, PyObject *args) {
  long long d, dt, heads, groups;
  int lseBaseE, positions, dqF32, dkvF32;
  if (!PyArg_ParseTuple(args, "LLLLpppp", &d, &dt, &heads, &groups, &lseBaseE,
                        &positions, &dqF32, &dkvF32))
    return nullptr;
  return guarded([&] {
    smla::ext::BwdConfig config;
    config.n.D = d;
    config.n.Dt = dt;
    config.n.H = heads;
    config.n.G = groups;
    config.lseBaseE = lseBaseE;
    config.positions = positions;
    config.dqDtype = dqF32 ? at::kFloat : at::kBFloat16;
    config.dkvDtype = dkvF32 ? at::kFloat : at::kBFloat16;
    std::string why;
    smla::ext::BwdSelection found = smla::ext::findInLibraries(config, &why);
    return Py_BuildValue("(Nss)", PyBool_FromLong(found.bwd != nullptr),
                         smla::ext::compileConfig(config).c_str(),
                         found.bwd ? "" : why.c_str());
  });
}

PyObject *lastChoice(PyObject *, PyObject *) {
  const smla::ext::Choice &choice = smla::ext::lastChoice();
  if (choice.kernel.empty())
    Py_RETURN_NONE;
  return Py_BuildValue("{s:s,s:s,s:s,s:s}", "kernel", choice.kernel.c_str(),
                       "directory", choice.directory.c_str(), "pairs",
                       choice.pairs.c_str(), "walk", choice.walk.c_str());
}

PyMethodDef methods[] = {
    {"kernel_directory", kernelDirectory, METH_NOARGS,
     "kernel_directory() -> str\n\n"
     "The directory torch.ops.smla.sparse_mla_bwd loads manifest.json and the\n"
     "cubins from: $SMLA_KERNEL_DIR if set (relative to the working\n"
     "directory), else the installed package's kernels/ directory. Looked up\n"
     "on every call; each library is opened once per process."},
    {"set_package_kernel_directory",
     withDirectory<smla::ext::setPackageKernelDirectory>, METH_VARARGS,
     "set_package_kernel_directory(path)\n\n"
     "The package's kernels/ directory, used when SMLA_KERNEL_DIR is not set\n"
     "(smla._compiled.load sets it)."},
    {"add_kernel_directory", withDirectory<smla::ext::addKernelDirectory>,
     METH_VARARGS,
     "add_kernel_directory(path)\n\n"
     "Opens the kernel library in `path` and adds it to those every call\n"
     "selects from, after the one in kernel_directory() (smla._library adds\n"
     "kernels compiled on first use)."},
    {"kernels", kernels, METH_NOARGS,
     "kernels() -> list[dict]\n\n"
     "The kernels of every library a call selects from, in selection order,\n"
     "as dicts with keys 'name', 'kind', 'config', 'directory', 'target',\n"
     "'compiler' and 'spec'. Opens (and caches) the libraries; raises\n"
     "RuntimeError naming the directory if one cannot be opened (missing\n"
     "manifest, bad JSON, a cubin that does not match its digest)."},
    {"check_library", checkLibrary, METH_VARARGS,
     "check_library(device: int)\n\n"
     "Opens the library in kernel_directory() and, for device >= 0, checks\n"
     "that CUDA device `device` runs its target; raises RuntimeError saying\n"
     "why not."},
    {"find_kernel", findKernel, METH_VARARGS,
     "find_kernel(d, dt, heads, groups, lse_base_e, positions, dq_f32,\n"
     "            dkv_f32) -> (found, config, why)\n\n"
     "Whether some library has a bwd kernel for the configuration; `config`\n"
     "is its smla-compile --config string, `why` (when not found) lists the\n"
     "closest kernels and how to build it."},
    {"last_choice", lastChoice, METH_NOARGS,
     "last_choice() -> dict | None\n\n"
     "What the last sparse_mla_bwd call on this thread ran: 'kernel',\n"
     "'directory', 'pairs' and 'walk' (smla's debug log reports it)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef moduleDef = {
    PyModuleDef_HEAD_INIT,
    "_C",
    "smla's compiled extension: registers torch.ops.smla.sparse_mla_bwd.\n\n"
    "Kernel directory: $SMLA_KERNEL_DIR, else the installed package's\n"
    "kernels/ (see kernel_directory() and python/USAGE.md).",
    -1,
    methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

} // namespace

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&moduleDef); }
