//===- smla-opt.cpp - mlir-opt with the smla dialect and passes -----------===//
//
// Part of the smla project: a compiled sparse-MLA backward.
//
//===----------------------------------------------------------------------===//

#include "smla/Conversion/Passes.h"
#include "smla/Dialect/SMLA/IR/SMLA.h"
#include "smla/Dialect/SMLAGPU/IR/SMLAGPU.h"
#include "smla/Dialect/SMLA/Transforms/Passes.h"
#include "smla/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::smla::registerSMLAPasses();
  mlir::smla::registerSMLAConversionPasses();
  mlir::smla::registerPipelines();

  mlir::DialectRegistry registry;
  registry.insert<mlir::smla::SMLADialect, mlir::smla_gpu::SMLAGPUDialect>();
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  // gpu-module-to-binary (the smla-gpu pipeline) translates to LLVM IR.
  mlir::registerAllToLLVMIRTranslations(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "smla optimizer driver\n", registry));
}
