// RUN: stretto-opt %s -split-input-file -verify-diagnostics --train-autodiff --train-autodiff

// The pass runs twice on every case: a failure in the first run stops the
// pipeline, and a case that succeeds once shows what the second run says.

// An op without a VJP on the path from a parameter to the loss is an error at that op.
train.model @newton_schulz {
  train.param @w : tensor<3x3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3x3xf32>
    // expected-error @+1 {{'train.newton_schulz' is not differentiable, but the loss depends on a parameter through it}}
    %o = train.newton_schulz %w : tensor<3x3xf32>
    %l = train.reduce_sum %o [0, 1] : tensor<3x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// gt is not differentiable either, even as a mask.
train.model @gt {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3xf32>
    %z = train.constant dense<0.0> : tensor<f32>
    // expected-error @+1 {{'train.gt' is not differentiable, but the loss depends on a parameter through it}}
    %m = train.gt %w, %z : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
    %y = train.mul %w, %m : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A non-differentiable op that the loss does not depend on is fine; here the
// second run then finds the gradient the first one added.
train.model @nondiff_off_path {
  train.param @w : tensor<3x3xf32> = normal(1.0)
  // expected-error @+1 {{already has 'train.grad' ops; run train-autodiff once}}
  train.step {
    %w = train.read @w : tensor<3x3xf32>
    %o = train.newton_schulz %w : tensor<3x3xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<3x3xf32> -> tensor<f32>
    %m = train.reduce_sum %o [0, 1] : tensor<3x3xf32> -> tensor<f32>
    train.yield %l, %m : tensor<f32>, tensor<f32>
  }
}

// -----

// The loss must be a scalar; the yield's operand type already enforces it.
train.model @nonscalar {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3xf32>
    // expected-error @+1 {{'train.yield' op operand #0 must be variadic of 0D tensor of 32-bit float or bfloat16 type or 64-bit float values, but got 'tensor<3xf32>'}}
    "train.yield"(%w) : (tensor<3xf32>) -> ()
  }
}

// -----

// A loss that depends on no parameter (only on state) cannot be differentiated.
train.model @no_param {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.state @s : tensor<3xf32> = zeros
  train.step {
    %s = train.read @s : tensor<3xf32>
    %l = train.reduce_sum %s [0] : tensor<3xf32> -> tensor<f32>
    // expected-error @+1 {{the loss does not depend on any parameter}}
    train.yield %l : tensor<f32>
  }
}

// -----

// A loss that depends only on a parameter's metric-only read still does not depend on a parameter.
train.model @metric_only {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %x [0] : tensor<3xf32> -> tensor<f32>
    %m = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    // expected-error @+1 {{the loss does not depend on any parameter}}
    train.yield %l, %m : tensor<f32>, tensor<f32>
  }
}

// -----

// A step that already has gradients is not differentiated again.
train.model @grad_present {
  train.param @w : tensor<3xf32> = normal(1.0)
  // expected-error @+1 {{already has 'train.grad' ops; run train-autodiff once}}
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.grad %w for @w : tensor<3xf32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Running autodiff twice: the second run finds the first run's train.grad.
train.model @twice {
  train.param @w : tensor<3xf32> = normal(1.0)
  // expected-error @+1 {{already has 'train.grad' ops; run train-autodiff once}}
  train.step {
    %w = train.read @w : tensor<3xf32>
    %y = train.mul %w, %w : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A model without a step has nothing to differentiate.
// expected-error @+1 {{has no 'train.step' to differentiate}}
train.model @no_step {
  train.param @w : tensor<3xf32> = normal(1.0)
}
