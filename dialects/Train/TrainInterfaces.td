//===- TrainInterfaces.td - op interfaces of `train` -------*- tablegen -*-===//
#ifndef STRETTO_TRAIN_INTERFACES
#define STRETTO_TRAIN_INTERFACES

include "mlir/IR/OpBase.td"

def Train_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::stretto::train";
  let description = [{
    An op that states its vector-Jacobian product. Given the cotangent of its
    single result, `buildVJP` creates, at the builder's insertion point, the
    ops computing the cotangent of each operand, and appends one value per
    operand to `operandGrads` (a null Value for an operand that carries no
    gradient, such as token ids). Autodiff sums the contributions of fan-out.
  }];
  let methods = [
    InterfaceMethod<"Build the VJP of this op.", "void", "buildVJP",
      (ins "::mlir::OpBuilder &":$b, "::mlir::Value":$cotangent,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

#endif // STRETTO_TRAIN_INTERFACES
