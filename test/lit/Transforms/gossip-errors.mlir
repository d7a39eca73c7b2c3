// RUN: stretto-opt %s -split-input-file -verify-diagnostics --train-gossip

// The outer optimizer moves parameters that the local steps updated: without
// train.update (train-optimizer) there is nothing to synchronise.
// expected-error @+1 {{has no 'train.update'; run train-optimizer before train-gossip}}
train.model @no_update {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// An unknown topology in the trainer dictionary is rejected by the model
// verifier, before the pass runs.
// expected-error @+1 {{trainer option 'topology' is 'star'; expected one of: complete ring exponential one-peer two-peer}}
train.model @bad_topology attributes {trainer = {topology = "star"}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
  }
}

// -----

// One local-step count per replica, or one for all: 2 for 3 replicas is an error.
// expected-error @+1 {{local-steps has 2 entries for 3 replicas; give one value for all or one per replica}}
train.model @steps_count attributes {trainer = {replicas = 3, local_steps = array<i64: 4, 4>}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
  }
}

// -----

// DiLoCo averages over every replica: asking for a ring with sync = "diloco"
// is a contradiction.
// expected-error @+1 {{trainer.sync is 'diloco', which averages over all replicas, but the topology is 'ring'; use sync = "gossip" or topology complete}}
train.model @diloco_ring attributes {trainer = {replicas = 4, sync = "diloco", topology = "ring"}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
  }
}

// -----

// The outer acceleration must be in [0, 1) (the model's verifier checks the
// trainer key; the pass checks its own option the same way).
// expected-error @+1 {{trainer option 'outer_momentum' must be in [0, 1), got 1}}
train.model @gamma_one attributes {trainer = {outer_momentum = 1.0}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
  }
}

// -----

// alpha = 0 would never mix.
// expected-error @+1 {{trainer option 'gossip_alpha' must be in (0, 1], got 0}}
train.model @alpha_zero attributes {trainer = {gossip_alpha = 0.0}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
  }
}

// -----

// The outer learning rate must be positive.
// expected-error @+1 {{trainer option 'outer_lr' must be > 0, got -0.5}}
train.model @negative_lr attributes {trainer = {outer_lr = -0.5}} {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
  }
}

// -----

// Running the pass twice would nest two outer optimizers.
train.model @twice {
  train.param @w : tensor<3xf32> = zeros
  train.step {
    %w = train.read @w : tensor<3xf32>
    %l = train.reduce_sum %w [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.update {
  }
  // expected-error @+1 {{already exists; run train-gossip once}}
  train.outer {
  }
}
