//===- KernelDialect.td - the `kernel` dialect -------------*- tablegen -*-===//
#ifndef STRETTO_KERNEL_DIALECT
#define STRETTO_KERNEL_DIALECT

include "mlir/IR/OpBase.td"

def Kernel_Dialect : Dialect {
  let name = "kernel";
  let cppNamespace = "::stretto::kernel";
  let summary = "Kernel-level IR of Stretto: fused kernels printed to source by codegen";
  let description = [{
    Level 3 of docs/design.md §2. A `kernel.elementwise` is one fused launch:
    its region is the per-element computation on scalars, written with the
    scalar ops of this dialect, and codegen prints that region once as a
    kernel body shared by the C++ (host compiler) and CUDA C (NVRTC) targets.
    The dialect does not depend on `train`; `kernel-fuse-elementwise` builds
    kernels from `train` ops.
  }];
}

class Kernel_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kernel_Dialect, mnemonic, traits>;

#endif // STRETTO_KERNEL_DIALECT
