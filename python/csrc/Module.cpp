//===- Module.cpp - The smla._C module and the op's schema ----------------===//
//
// Part of the smla project: a compiled sparse-MLA backward for sm_90a.
//
//===----------------------------------------------------------------------===//
//
// Importing smla._C registers, through static initializers, the private
// ops smla::_launch_bwd and smla::_delta (their CUDA implementations in
// SparseMlaBwd.cpp) that the public op torch.ops.smla.sparse_mla_bwd
// (smla/_op.py) runs, and smla::aligned_pair_rows. The Python module itself is
// a plain C-API module of helpers (the kernel libraries, the lookups
// smla/_library.py plans with, the settings smla.config hands over), so it
// needs neither pybind11 nor libtorch_python.
//
//===----------------------------------------------------------------------===//

#include "KernelChoice.h"
#include "KernelDirectory.h"
#include "Options.h"

#include "smla/runtime/Error.h"

#include <Python.h>
#include <torch/library.h>

// A fragment of the smla namespace: smla/_op.py defines the public op in
// another. _launch_bwd takes a base-2 lse and arguments laid out as the
// kernels read them (LaunchArgs.h); smla/_op.py calls it positionally.
TORCH_LIBRARY_FRAGMENT(smla, m) {
  m.def("_launch_bwd(Tensor q, Tensor kv, Tensor o, Tensor do, "
        "Tensor indices, Tensor lse, float sm_scale, Tensor? q_positions, "
        "Tensor? delta, ScalarType dq_dtype, ScalarType dkv_dtype, "
        "Tensor? topk_length) -> (Tensor dq, Tensor dkv, Tensor counters)");
  // Delta = rowsum(o * do), [T, H] fp32, by the library's "delta" kernel of
  // the bwd kernel a call of these sizes selects (smla/_op.py takes it for
  // an attention sink's gradient and hands it to _launch_bwd).
  m.def("_delta(Tensor o, Tensor do, int dt, int groups, bool positions, "
        "ScalarType dq_dtype, ScalarType dkv_dtype) -> Tensor");
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

/// The BwdConfig of find_kernel's and served_heads' arguments.
smla::ext::BwdConfig bwdConfig(long long d, long long dt, long long heads,
                               long long groups, int positions, int dqF32,
                               int dkvF32) {
  smla::ext::BwdConfig config;
  config.n.D = d;
  config.n.Dt = dt;
  config.n.H = heads;
  config.n.G = groups;
  config.positions = positions;
  config.dqDtype = dqF32 ? at::kFloat : at::kBFloat16;
  config.dkvDtype = dkvF32 ? at::kFloat : at::kBFloat16;
  return config;
}

PyObject *findKernel(PyObject *, PyObject *args) {
  long long d, dt, heads, groups;
  int positions, dqF32, dkvF32;
  if (!PyArg_ParseTuple(args, "LLLLppp", &d, &dt, &heads, &groups, &positions,
                        &dqF32, &dkvF32))
    return nullptr;
  return guarded([&] {
    const smla::ext::BwdConfig config =
        bwdConfig(d, dt, heads, groups, positions, dqF32, dkvF32);
    std::string why;
    smla::ext::BwdSelection found = smla::ext::findInLibraries(config, &why);
    return Py_BuildValue("(Nss)", PyBool_FromLong(found.bwd != nullptr),
                         smla::ext::compileConfig(config).c_str(),
                         found.bwd ? "" : why.c_str());
  });
}

PyObject *servedHeads(PyObject *, PyObject *args) {
  long long d, dt, groups, most;
  int positions, dqF32, dkvF32;
  if (!PyArg_ParseTuple(args, "LLLpppL", &d, &dt, &groups, &positions, &dqF32,
                        &dkvF32, &most))
    return nullptr;
  return guarded([&]() -> PyObject * {
    const std::vector<int64_t> heads = smla::ext::servedHeads(
        bwdConfig(d, dt, 1, groups, positions, dqF32, dkvF32), most);
    PyObject *list = PyList_New(0);
    for (int64_t h : heads) {
      PyObject *item = PyLong_FromLongLong(h);
      if (item == nullptr || PyList_Append(list, item) != 0) {
        Py_XDECREF(item);
        Py_DECREF(list);
        return nullptr;
      }
      Py_DECREF(item);
    }
    return list;
  });
}

PyObject *setOptions(PyObject *, PyObject *args) {
  const char *directory = nullptr;
  int walk, pairs, pairsRows;
  long long period, chunkTokens, l2Bytes, pairsChunk;
  if (!PyArg_ParseTuple(args, "siLLLiLi", &directory, &walk, &period,
                        &chunkTokens, &l2Bytes, &pairs, &pairsChunk,
                        &pairsRows))
    return nullptr;
  if (walk < 0 || walk > 2 || pairs < 0 || pairs > 2 || pairsRows < 0 ||
      pairsRows > 1) {
    PyErr_SetString(PyExc_ValueError,
                    "smla._C.set_options: a choice outside its range "
                    "(smla/_compiled.py hands over smla.config's values)");
    return nullptr;
  }
  return guarded([&] {
    smla::ext::OpOptions options;
    options.walk.mode = static_cast<smla::ext::WalkOptions::Mode>(walk);
    options.walk.period = period;
    options.walk.chunkTokens = chunkTokens;
    options.walk.l2Bytes = l2Bytes;
    options.pairs.mode = static_cast<smla::ext::PairsMode>(pairs);
    options.pairs.chunk = pairsChunk;
    options.pairs.rowsInDq = pairsRows == 0;
    smla::ext::setKernelDirectory(directory);
    smla::ext::setOpOptions(options);
    Py_RETURN_NONE;
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
     "cubins from: smla.config.kernel_dir (SMLA_KERNEL_DIR) if set, else the\n"
     "installed package's kernels/ directory. Each library is opened once per\n"
     "process."},
    {"set_package_kernel_directory",
     withDirectory<smla::ext::setPackageKernelDirectory>, METH_VARARGS,
     "set_package_kernel_directory(path)\n\n"
     "The package's kernels/ directory, used when no kernel directory is set\n"
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
     "find_kernel(d, dt, heads, groups, positions, dq_f32, dkv_f32)\n"
     "    -> (found, config, why)\n\n"
     "Whether some library has a bwd kernel (base-2 lse) for the\n"
     "configuration; `config` is its smla-compile --config string, `why`\n"
     "(when not found) lists the closest kernels and how to build it."},
    {"served_heads", servedHeads, METH_VARARGS,
     "served_heads(d, dt, groups, positions, dq_f32, dkv_f32, most)\n"
     "    -> list[int]\n\n"
     "The head counts up to `most` that some library has a bwd kernel of the\n"
     "configuration for (find_kernel's rule)."},
    {"set_options", setOptions, METH_VARARGS,
     "set_options(kernel_dir, walk, walk_period, walk_chunk_tokens,\n"
     "            walk_l2_bytes, pairs, pairs_chunk, pairs_rows)\n\n"
     "The settings the op reads (smla.config; smla/_compiled.py hands them\n"
     "over): the kernel directory ('' for the package's), the walk, pairs\n"
     "and pairs_rows as positions among their choices, -1 for unset\n"
     "integers."},
    {"last_choice", lastChoice, METH_NOARGS,
     "last_choice() -> dict | None\n\n"
     "What the last sparse_mla_bwd call on this thread ran: 'kernel',\n"
     "'directory', 'pairs' and 'walk' (smla's debug log reports it)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef moduleDef = {
    PyModuleDef_HEAD_INIT,
    "_C",
    "smla's compiled extension: registers torch.ops.smla._launch_bwd, which\n"
    "torch.ops.smla.sparse_mla_bwd (smla/_op.py) runs.\n\n"
    "Kernel directory: smla.config.kernel_dir, else the installed package's\n"
    "kernels/ (see kernel_directory() and python/USAGE.md).",
    -1,
    methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

} // namespace

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&moduleDef); }
