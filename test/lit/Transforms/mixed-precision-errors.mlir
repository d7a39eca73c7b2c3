// RUN: stretto-opt %s -split-input-file -verify-diagnostics --train-mixed-precision

// Before autodiff the backward's activation gradients do not exist yet.
train.model @early {
  train.param @w : tensor<4x4xf32> = normal(1.0)
  // expected-error @+1 {{train-mixed-precision runs after train-autodiff (the backward's activation gradients are stored in bf16 too); this step has no train.grad}}
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %w = train.read @w : tensor<4x4xf32>
    %y = train.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A bf16 model has no f32 to keep: the pass assigns storage to f32 models.
train.model @bf16 {
  train.param @w : tensor<4xbf16> = normal(1.0)
  train.step {
    // expected-error @+1 {{train-mixed-precision expects f32 tensors (the compute type; bf16 is the storage it assigns), found 'tensor<4xbf16>'}}
    %w = train.read @w : tensor<4xbf16>
    %y = train.mul %w, %w : tensor<4xbf16>
    %l = train.reduce_sum %y [0] : tensor<4xbf16> -> tensor<bf16>
    train.grad %y for @w : tensor<4xbf16>
    train.yield %l : tensor<bf16>
  }
}

// -----

// expected-error @+1 {{train-mixed-precision needs the model's train.step phase}}
train.model @nostep {
  train.param @w : tensor<4xf32> = normal(1.0)
}
