// RUN: stretto-opt %s -split-input-file -verify-diagnostics --train-optimizer

// The optimizer needs gradients: running it before train-autodiff is an error.
// expected-error @+1 {{has no 'train.grad' ops; run train-autodiff first}}
train.model @no_grads {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A decaying schedule needs total_steps > warmup_steps (equal is an error).
// expected-error @+1 {{schedule 'cosine' needs total_steps (10) > warmup_steps (10)}}
train.model @cosine_equal attributes {trainer = {schedule = "cosine", warmup_steps = 10, total_steps = 10}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.grad %w for @w : tensor<3xf32>
    train.yield %l : tensor<f32>
  }
}

// -----

// The linear schedule has the same requirement.
// expected-error @+1 {{schedule 'linear' needs total_steps (5) > warmup_steps (8)}}
train.model @linear_short attributes {trainer = {schedule = "linear", warmup_steps = 8, total_steps = 5}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.grad %w for @w : tensor<3xf32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Without total_steps the default is 1, so any warm-up makes a cosine schedule invalid.
// expected-error @+1 {{schedule 'cosine' needs total_steps (1) > warmup_steps (3)}}
train.model @cosine_default_total attributes {trainer = {schedule = "cosine", warmup_steps = 3}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.grad %w for @w : tensor<3xf32>
    train.yield %l : tensor<f32>
  }
}

// -----

// The constant schedule ignores total_steps: no error.
train.model @constant_ok attributes {trainer = {schedule = "constant", warmup_steps = 8, total_steps = 5}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.grad %w for @w : tensor<3xf32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Parameters of different element types are rejected (there is no conversion
// op for the shared schedule and clipping scalars yet), at the first gradient
// that differs, naming both types.
train.model @mixed {
  train.param @w : tensor<4x2xf32> = normal(0.1)
  train.param @h : tensor<2x3xbf16> = normal(0.1)
  train.step {
    %w = train.read @w : tensor<4x2xf32>
    %h = train.read @h : tensor<2x3xbf16>
    train.grad %w for @w : tensor<4x2xf32>
    // expected-error @+1 {{gradient of @h is 'tensor<2x3xbf16>' but the first gradient has element type 'f32'}}
    train.grad %h for @h : tensor<2x3xbf16>
    %l = train.reduce_sum %w [0, 1] : tensor<4x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A decaying schedule without total_steps would silently decay in one step.
// expected-error @+1 {{schedule 'cosine' decays over trainer.total_steps, which is not set}}
train.model @no_total attributes {trainer = {schedule = "cosine"}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.grad %w for @w : tensor<3xf32>
    train.yield %l : tensor<f32>
  }
}
