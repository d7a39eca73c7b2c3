// RUN: stretto-opt %s -split-input-file -verify-diagnostics

// The exchange happens only in an outer round, never per micro-batch.
train.model @m {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    // expected-error @+1 {{'train.gossip_mix' op expects parent op 'train.outer'}}
    %m = train.gossip_mix %w : tensor<3xf32>
    %l = train.reduce_sum %m [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// alpha outside (0, 1] is rejected, naming the mixed type.
train.model @m {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.outer {
    %w = train.read @w : tensor<3xf32>
    // expected-error @+1 {{'train.gossip_mix' op alpha must be in (0, 1], got 1.5 (mixing 'tensor<3xf32>')}}
    %m = train.gossip_mix %w {alpha = 1.5} : tensor<3xf32>
    train.write %m to @w : tensor<3xf32>
  }
}

// -----

// Mixing cannot change the type.
train.model @m {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.outer {
    %w = train.read @w : tensor<3xf32>
    // expected-error @+1 {{'train.gossip_mix' op requires the same type for all operands and results}}
    %m = "train.gossip_mix"(%w) : (tensor<3xf32>) -> tensor<3xf64>
  }
}

// -----

// The round's topology must be one the runtime can draw.
train.model @m {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  // expected-error @+1 {{'train.outer' op attribute 'topology' is "torus"; expected one of: complete ring exponential one-peer two-peer}}
  train.outer attributes {topology = "torus"} {
    %w = train.read @w : tensor<3xf32>
    %m = train.gossip_mix %w : tensor<3xf32>
    train.write %m to @w : tensor<3xf32>
  }
}

// -----

// One local-step count, or one per replica.
train.model @m {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  // expected-error @+1 {{'train.outer' op attribute 'local_steps' has 3 entries; expected 1 or one per replica (2)}}
  train.outer attributes {replicas = 2, local_steps = array<i64: 1, 2, 3>} {
    %w = train.read @w : tensor<3xf32>
    %m = train.gossip_mix %w : tensor<3xf32>
    train.write %m to @w : tensor<3xf32>
  }
}

// -----

// Negative local steps are meaningless.
train.model @m {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  // expected-error @+1 {{'train.outer' op attribute 'local_steps' holds -1; local steps must be >= 0}}
  train.outer attributes {local_steps = array<i64: -1>} {
    %w = train.read @w : tensor<3xf32>
    %m = train.gossip_mix %w : tensor<3xf32>
    train.write %m to @w : tensor<3xf32>
  }
}

// -----

// The trainer's local_steps is an integer or an array<i64> of counts >= 0.
// expected-error @+1 {{'train.model' op trainer option 'local_steps' must hold integers >= 0, got -3}}
train.model @m attributes {trainer = {local_steps = array<i64: 2, -3>}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// expected-error @+1 {{'train.model' op trainer option 'local_steps' must be an integer or an array<i64>, got "many"}}
train.model @m attributes {trainer = {local_steps = "many"}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
