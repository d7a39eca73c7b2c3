//===- TrainDialect.td - the `train` dialect ---------------*- tablegen -*-===//
#ifndef STRETTO_TRAIN_DIALECT
#define STRETTO_TRAIN_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Train_Dialect : Dialect {
  let name = "train";
  let cppNamespace = "::stretto::train";
  let summary = "Model-level and training-step-level IR of Stretto";
  let description = [{
    The `train` dialect describes a model's forward computation and loss on
    static-shaped tensors, its parameters with their initializers, and the
    trainer (optimizer, schedule, micro-batches, stages, replicas) as
    attributes of `train.model`. Passes turn it into a complete training step:
    `train-autodiff` adds the backward pass, `train-optimizer` the updates.
    Persistent values (parameters, optimizer state) are symbols read and
    written with `train.read` / `train.write` inside `train.step`, so every
    piece of state a pass adds is visible in the IR.
  }];
  let hasConstantMaterializer = 1;
}

def Train_InitKind : I32EnumAttr<"InitKind", "initializer of a parameter or state", [
  I32EnumAttrCase<"zeros", 0>,
  I32EnumAttrCase<"ones", 1>,
  I32EnumAttrCase<"normal", 2>,
  I32EnumAttrCase<"uniform", 3>,
]> {
  let cppNamespace = "::stretto::train";
}

class Train_Op<string mnemonic, list<Trait> traits = []>
    : Op<Train_Dialect, mnemonic, traits>;

#endif // STRETTO_TRAIN_DIALECT
