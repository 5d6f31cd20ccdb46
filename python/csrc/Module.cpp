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

PyObject *kernelDirectory(PyObject *, PyObject *) {
  return PyUnicode_DecodeFSDefault(smla::ext::kernelDirectory().c_str());
}

PyObject *kernels(PyObject *, PyObject *) {
  try {
    const smla::runtime::Manifest &manifest =
        smla::ext::kernelLibrary().manifest();
    PyObject *list = PyList_New(0);
    for (const smla::runtime::KernelEntry &kernel : manifest.kernels) {
      PyObject *item = Py_BuildValue(
          "{s:s,s:s,s:s}", "name", kernel.name.c_str(), "kind",
          kernel.kind.c_str(), "config", kernel.config.str().c_str());
      if (item == nullptr || PyList_Append(list, item) != 0) {
        Py_XDECREF(item);
        Py_DECREF(list);
        return nullptr;
      }
      Py_DECREF(item);
    }
    return list;
  } catch (const smla::runtime::Error &error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

PyMethodDef methods[] = {
    {"kernel_directory", kernelDirectory, METH_NOARGS,
     "kernel_directory() -> str\n\n"
     "The directory torch.ops.smla.sparse_mla_bwd loads manifest.json and the\n"
     "cubins from: $SMLA_KERNEL_DIR if set, else the package's kernels/\n"
     "directory (filled by installing with -DSMLA_KERNEL_DIR=<dir>). The\n"
     "kernels are opened once per process, at the first call that needs one."},
    {"kernels", kernels, METH_NOARGS,
     "kernels() -> list[dict]\n\n"
     "The kernels of the manifest in kernel_directory(), as dicts with keys\n"
     "'name', 'kind' and 'config', in selection order. Opens (and caches) the\n"
     "kernel library; raises RuntimeError naming the directory if it cannot\n"
     "(missing manifest, bad JSON, a cubin that does not match its digest)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef moduleDef = {
    PyModuleDef_HEAD_INIT,
    "_C",
    "smla's compiled extension: registers torch.ops.smla.sparse_mla_bwd.\n\n"
    "Kernel directory: $SMLA_KERNEL_DIR, else smla/kernels/ (see\n"
    "kernel_directory() and python/USAGE.md, 'Building the extension').",
    -1,
    methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

} // namespace

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&moduleDef); }
