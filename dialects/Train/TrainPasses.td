//===- TrainPasses.td - passes over the `train` dialect ----*- tablegen -*-===//
#ifndef STRETTO_TRAIN_PASSES
#define STRETTO_TRAIN_PASSES

include "mlir/Pass/PassBase.td"

def TrainAutodiff : Pass<"train-autodiff", "::stretto::train::ModelOp"> {
  let summary = "Reverse-mode differentiation of the loss w.r.t. every parameter";
  let description = [{
    Walks `train.step` backwards from the loss (first `train.yield` operand),
    asks each op for its VJP through `DifferentiableOpInterface`, sums the
    contributions of values used more than once, and ends every parameter's
    chain in a `train.grad`. A parameter that reaches the loss through an op
    with no VJP is an error at that op.

    Before:
    ```mlir
    %w = train.read @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.cross_entropy %y, %t : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
    ```
    After (abridged): the forward, then
    ```mlir
    %dy = ... softmax(y) - one_hot(t), scaled by 1/2 ...
    %xt = train.transpose %x [1, 0] : tensor<2x4xf32> -> tensor<4x2xf32>
    %dw = train.matmul %xt, %dy : tensor<4x2xf32>, tensor<2x3xf32> -> tensor<4x3xf32>
    train.grad %dw for @w : tensor<4x3xf32>
    train.yield %l : tensor<f32>
    ```
  }];
}

def TrainOptimizer : Pass<"train-optimizer", "::stretto::train::ModelOp"> {
  let summary = "Replaces gradients with optimizer updates (SGD, AdamW, Muon)";
  let description = [{
    Consumes every `train.grad`: clips by global norm, computes the learning
    rate schedule from `train.step_count`, declares the optimizer state as
    `train.state` symbols and writes the updated parameters and state.
    Options default to the `trainer` dictionary of the model; a pass option
    given explicitly wins.

    Muon (Jordan et al., 2024) for 2-D `matrix` parameters: M ← βM + (1−β)g,
    U = (1−β)g + βM (Nesterov), O = NewtonSchulz5(U), scaled by
    sqrt(max(1, fan_out/fan_in)) — weights are stored [in, out], so that is
    sqrt(max(1, cols/rows)) — or by 0.2·sqrt(max(rows, cols)) with
    `muon-scale=rms`; decoupled weight decay. All parameters must share one
    element type; decaying schedules need `total_steps`. Embeddings, the head and
    parameters with fewer than 2 dims use AdamW (Loshchilov & Hutter, 2019).
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"\"",
           "sgd | adamw | muon (default: the model's trainer.optimizer, else adamw)">,
    Option<"muonScale", "muon-scale", "std::string", "\"\"",
           "shape (sqrt(max(1,fan_out/fan_in))) | rms (0.2*sqrt(max(rows,cols)))">,
  ];
}

#endif // STRETTO_TRAIN_PASSES
