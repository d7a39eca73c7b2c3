// RUN: stretto-opt %s -split-input-file -verify-diagnostics --train-partition

// More stages than layers cannot be balanced.
// expected-error @+1 {{cannot split 2 layer(s) into 3 stage(s)}}
train.model @too_many attributes {trainer = {stages = 3}} {
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.step {
    %x = train.input "x" : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.matmul %x, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %h, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Explicit ranges that overlap are rejected, naming the stage and the overlap.
// expected-error @+1 {{stage_ranges: stage 1 is [1, 3) but it overlaps the previous stage, which ends at 2}}
train.model @overlap attributes {trainer = {stages = 2, stage_ranges = [[0, 2], [1, 3]]}} {
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @c : tensor<2x2xf32> = normal(0.1) {layer = 2 : i64}
  train.step {
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %c = train.read @c : tensor<2x2xf32>
    %h = train.matmul %a, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %h, %c : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A gap between ranges leaves layers without a stage.
// expected-error @+1 {{stage_ranges: stage 1 is [2, 3) but layers [1, 2) belong to no stage}}
train.model @gap attributes {trainer = {stages = 2, stage_ranges = [[0, 1], [2, 3]]}} {
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @c : tensor<2x2xf32> = normal(0.1) {layer = 2 : i64}
  train.step {
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %c = train.read @c : tensor<2x2xf32>
    %h = train.matmul %a, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %h, %c : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Ranges must end at the last layer.
// expected-error @+1 {{stage_ranges: layers [2, 3) belong to no stage}}
train.model @short attributes {trainer = {stages = 2, stage_ranges = [[0, 1], [1, 2]]}} {
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @c : tensor<2x2xf32> = normal(0.1) {layer = 2 : i64}
  train.step {
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %c = train.read @c : tensor<2x2xf32>
    %h = train.matmul %a, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %h, %c : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// The number of ranges must match the number of stages.
// expected-error @+1 {{stage_ranges gives 1 range(s) for 2 stage(s)}}
train.model @count attributes {trainer = {stages = 2, stage_ranges = [[0, 2]]}} {
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.step {
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %y = train.matmul %a, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Without layer attributes there is nothing to split.
// expected-error @+1 {{no parameter has a 'layer' attribute, so there are no layers to partition}}
train.model @flat attributes {trainer = {stages = 2}} {
  train.param @a : tensor<2x2xf32> = normal(0.1)
  train.step {
    %a = train.read @a : tensor<2x2xf32>
    %l = train.reduce_sum %a [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Partitioning comes before autodiff.
// expected-error @+1 {{train-partition runs on the model-level step, before train-autodiff}}
train.model @late attributes {trainer = {stages = 1}} {
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.step {
    %a = train.read @a : tensor<2x2xf32>
    %l = train.reduce_sum %a [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.grad %a for @a : tensor<2x2xf32>
    train.yield %l : tensor<f32>
  }
}
