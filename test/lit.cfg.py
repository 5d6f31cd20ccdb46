# -*- Python -*-
# lit configuration for the smla compiler tests (FileCheck, -verify-diagnostics).

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "SMLA"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.smla_obj_root, "test")
# Python test trees are run by pytest, not lit.
config.excludes = ["python", "execution", "lit.cfg.py", "CMakeLists.txt"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%smla_src_root", config.smla_src_root))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.smla_tools_dir, config.llvm_tools_dir]
tools = [
    "smla-opt",
    ToolSubst("FileCheck", unresolved="fatal"),
    ToolSubst("split-file", unresolved="fatal"),
    ToolSubst("not", unresolved="fatal"),
]
llvm_config.add_tool_substitutions(tools, tool_dirs)

llvm_config.with_environment("PATH", config.smla_tools_dir, append_path=True)

# GPU code generation tests that assemble PTX need ptxas (test/Target).
if os.path.exists("/usr/local/cuda/bin/ptxas"):
    config.available_features.add("ptxas")

# The SASS of compiled cubins (test/Target/spill-sites.mlir) needs
# cuobjdump; scripts/spill_sites.py finds it (scripts/install-deps.sh).
# The python3 on the tests' PATH, where the wheels were installed (lit
# itself may run under another one).
import shutil
import subprocess
import sys

_python = shutil.which("python3", path=config.environment["PATH"]) or sys.executable
_spill_sites = os.path.join(config.smla_src_root, "scripts", "spill_sites.py")
if subprocess.run([_python, _spill_sites, "--find"],
                  capture_output=True).returncode == 0:
    config.available_features.add("cuobjdump")
config.substitutions.append(("%spill_sites", f"{_python} {_spill_sites}"))
