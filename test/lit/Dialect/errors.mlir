// RUN: stretto-opt %s -split-input-file -verify-diagnostics

// Only train.param, train.state and train.step may sit directly in a model.
train.model @m {
  // expected-error @+1 {{'train.constant' op is not allowed directly in 'train.model' (only train.param, train.state, train.step, train.update and train.outer)}}
  %c = train.constant dense<1.000000e+00> : tensor<f32>
}

// -----

// A model has at most one step.
// expected-error @+1 {{'train.model' op has 2 'train.step' ops; expected at most one}}
train.model @m {
  train.param @w : tensor<2xf32> = zeros(0.0)
  train.step {
    %w = train.read @w : tensor<2xf32>
    %l = train.reduce_sum %w [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
  train.step {
    %w = train.read @w : tensor<2xf32>
    %l = train.reduce_sum %w [0] : tensor<2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A trainer key outside the schema is rejected by name.
// expected-error @+1 {{'train.model' op unknown trainer option 'learning_rate'}}
train.model @m attributes {trainer = {lr = 1.0e-3, learning_rate = 1.0e-3}} {
}

// -----

// A float option given a string names the option and the value.
// expected-error @+1 {{'train.model' op trainer option 'lr' must be a number, got "fast"}}
train.model @m attributes {trainer = {lr = "fast"}} {
}

// -----

// An integer option given a float names the option and the value.
// expected-error @+1 {{'train.model' op trainer option 'total_steps' must be an integer, got 1.000000e+02 : f64}}
train.model @m attributes {trainer = {total_steps = 100.0}} {
}

// -----

// A string option given a number names the option and the value.
// expected-error @+1 {{'train.model' op trainer option 'optimizer' must be a string, got 1 : i64}}
train.model @m attributes {trainer = {optimizer = 1}} {
}

// -----

// An enumerated option lists the accepted strings.
// expected-error @+1 {{'train.model' op trainer option 'optimizer' is 'lion'; expected one of: sgd adamw muon}}
train.model @m attributes {trainer = {optimizer = "lion"}} {
}

// -----

// muon_scale accepts only shape and rms.
// expected-error @+1 {{'train.model' op trainer option 'muon_scale' is 'spectral'; expected one of: shape rms}}
train.model @m attributes {trainer = {muon_scale = "spectral"}} {
}

// -----

// The schedule must be one of constant, cosine, linear.
// expected-error @+1 {{'train.model' op trainer option 'schedule' is 'step'; expected one of: constant cosine linear}}
train.model @m attributes {trainer = {schedule = "step"}} {
}

// -----

// The synchronisation mode must be a known one.
// expected-error @+1 {{'train.model' op trainer option 'sync' is 'async'; expected one of: sync 2bw diloco gossip}}
train.model @m attributes {trainer = {sync = "async"}} {
}

// -----

// Counts such as micro_batches must be at least 1.
// expected-error @+1 {{'train.model' op trainer option 'micro_batches' must be >= 1, got 0}}
train.model @m attributes {trainer = {micro_batches = 0}} {
}

// -----

// warmup_steps may be 0 but not negative.
// expected-error @+1 {{'train.model' op trainer option 'warmup_steps' must be >= 0, got -1}}
train.model @m attributes {trainer = {warmup_steps = -1}} {
}

// -----

// warmup_steps = 0 is accepted (its minimum is 0, not 1): keys are checked in
// sorted order, so the error is on the key after it.
// expected-error @+1 {{'train.model' op trainer option 'weight_decay' must be a number, got "none"}}
train.model @m attributes {trainer = {warmup_steps = 0, weight_decay = "none"}} {
}

// -----

// checkpoint_interval and seed may be 0 (their minimum is 0); stages, checked after them, may not.
// expected-error @+1 {{'train.model' op trainer option 'stages' must be >= 1, got 0}}
train.model @m attributes {trainer = {seed = 0, checkpoint_interval = 0, stages = 0}} {
}

// -----

// log_interval must be at least 1.
// expected-error @+1 {{'train.model' op trainer option 'log_interval' must be >= 1, got 0}}
train.model @m attributes {trainer = {log_interval = 0}} {
}

// -----

// Parameters need a static shape.
train.model @m {
  // expected-error @+1 {{'train.param' op needs a static shape with a 64-bit element count, got 'tensor<?x4xf32>'}}
  train.param @w : tensor<?x4xf32> = zeros(0.0)
}

// -----

// State needs a static shape too.
train.model @m {
  // expected-error @+1 {{'train.state' op needs a static shape with a 64-bit element count, got 'tensor<4x?xf32>'}}
  train.state @s : tensor<4x?xf32> = zeros(0.0)
}

// -----

// A normal initializer needs a positive scale.
train.model @m {
  // expected-error @+1 {{'train.param' op initializer 'normal' needs a positive scale, got 0.000000e+00}}
  train.param @w : tensor<4xf32> = normal(0.0)
}

// -----

// The scale may be omitted (it defaults to 0), which a normal initializer rejects.
train.model @m {
  // expected-error @+1 {{'train.param' op initializer 'normal' needs a positive scale, got 0.000000e+00}}
  train.param @w : tensor<4xf32> = normal
}

// -----

// A uniform initializer needs a positive scale.
train.model @m {
  // expected-error @+1 {{'train.state' op initializer 'uniform' needs a positive scale, got -1.000000e+00}}
  train.state @s : tensor<4xf32> = uniform(-1.0)
}

// -----

// A role outside the optimizer's parameter groups is rejected.
train.model @m {
  // expected-error @+1 {{'train.param' op unknown role 'weights'; expected embedding, head, matrix, bias or norm}}
  train.param @w : tensor<4x4xf32> = normal(0.02) {role = "weights"}
}

// -----

// `layout = "out_in"` marks a matrix held as nn.Linear holds it: 2-D only,
// and that one spelling.
train.model @m {
  // expected-error @+1 {{'train.param' op 'layout' must be "out_in" on a 2-D parameter (a matrix held [out, in], as PyTorch's nn.Linear holds it)}}
  train.param @b : tensor<4xf32> = zeros {layout = "out_in"}
}

// -----

train.model @m {
  // expected-error @+1 {{'train.param' op 'layout' must be "out_in" on a 2-D parameter}}
  train.param @w : tensor<4x4xf32> = zeros {layout = "in_out"}
}

// -----

// A tied parameter's aliases are names, none of them another symbol's
// (model.safetensors writes the tensor under each).
train.model @m {
  // expected-error @+1 {{'train.param' op 'aliases' must be an array of non-empty names (the other names of a tied parameter)}}
  train.param @w : tensor<4x4xf32> = zeros {aliases = ["head.weight", 3]}
}

// -----

train.model @m {
  // expected-error @+1 {{'train.param' op alias 'v' is also the name of a parameter or state}}
  train.param @w : tensor<4x4xf32> = zeros {aliases = ["v"]}
  train.param @v : tensor<4x4xf32> = zeros
}

// -----

// The step's yield needs the loss; an empty step gets an empty implicit yield.
train.model @m {
  // expected-error @+1 {{'train.yield' op needs the loss as its first operand}}
  train.step {
  }
}

// -----

// The yield needs the loss (generic form, since the custom form cannot print no values).
train.model @m {
  train.step {
    // expected-error @+1 {{'train.yield' op needs the loss as its first operand}}
    "train.yield"() : () -> ()
  }
}

// -----

// train.read names a symbol of its model.
train.model @m {
  train.param @w : tensor<4xf32> = zeros(0.0)
  train.step {
    // expected-error @+1 {{'train.read' op refers to @v, which is not declared in @m}}
    %v = train.read @v : tensor<4xf32>
    %l = train.reduce_sum %v [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// train.read's type must be the declared type.
train.model @m {
  train.param @w : tensor<4x3xf32> = zeros(0.0)
  train.step {
    // expected-error @+1 {{'train.read' op type 'tensor<3x4xf32>' differs from @w declared as 'tensor<4x3xf32>'}}
    %w = train.read @w : tensor<3x4xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// train.write names a symbol of its model.
train.model @m {
  train.param @w : tensor<4xf32> = zeros(0.0)
  train.step {
    %w = train.read @w : tensor<4xf32>
    // expected-error @+1 {{'train.write' op refers to @w.m, which is not declared in @m}}
    train.write %w to @w.m : tensor<4xf32>
    %l = train.reduce_sum %w [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// train.write's value type must be the declared type, element type included.
train.model @m {
  train.state @s : tensor<4xf32> = zeros(0.0)
  train.step {
    %x = train.input "x" : tensor<4xbf16>
    // expected-error @+1 {{'train.write' op type 'tensor<4xbf16>' differs from @s declared as 'tensor<4xf32>'}}
    train.write %x to @s : tensor<4xbf16>
    %l = train.reduce_sum %x [0] : tensor<4xbf16> -> tensor<bf16>
    train.yield %l : tensor<bf16>
  }
}

// -----

// train.grad names a symbol of its model.
train.model @m {
  train.param @w : tensor<4xf32> = zeros(0.0)
  train.step {
    %w = train.read @w : tensor<4xf32>
    // expected-error @+1 {{'train.grad' op refers to @u, which is not declared in @m}}
    train.grad %w for @u : tensor<4xf32>
    %l = train.reduce_sum %w [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// train.grad's type must be the parameter's type.
train.model @m {
  train.param @w : tensor<4xf32> = zeros(0.0)
  train.step {
    %x = train.input "x" : tensor<5xf32>
    // expected-error @+1 {{'train.grad' op type 'tensor<5xf32>' differs from @w declared as 'tensor<4xf32>'}}
    train.grad %x for @w : tensor<5xf32>
    %l = train.reduce_sum %x [0] : tensor<5xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Only parameters have gradients.
train.model @m {
  train.state @s : tensor<4xf32> = zeros(0.0)
  train.step {
    %s = train.read @s : tensor<4xf32>
    // expected-error @+1 {{'train.grad' op needs a parameter, but @s is a train.state}}
    train.grad %s for @s : tensor<4xf32>
    %l = train.reduce_sum %s [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// The custom constant form needs an elements attribute.
train.model @m {
  train.step {
    // expected-error @+1 {{custom op 'train.constant' expected a dense elements attribute}}
    %c = train.constant 1.0 : f32
  }
}

// -----

// A constant's value and result types agree (generic form).
train.model @m {
  train.step {
    // expected-error @+1 {{'train.constant' op value type 'tensor<2xf32>' differs from result type 'tensor<3xf32>'}}
    %c = "train.constant"() <{value = dense<1.000000e+00> : tensor<2xf32>}> : () -> tensor<3xf32>
  }
}

// -----

// Binary operands share one element type.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %b = train.input "b" : tensor<2x3xbf16>
    // expected-error @+1 {{'train.add' op operands and result must share one element type, got 'f32' and 'bf16'}}
    %c = train.add %a, %b : tensor<2x3xf32>, tensor<2x3xbf16> -> tensor<2x3xf32>
  }
}

// -----

// Binary operands must broadcast against each other.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %b = train.input "b" : tensor<4xf32>
    // expected-error @+1 {{'train.mul' op operands are not broadcast-compatible: lhs 'tensor<2x3xf32>', rhs 'tensor<4xf32>'}}
    %c = train.mul %a, %b : tensor<2x3xf32>, tensor<4xf32> -> tensor<2x3xf32>
  }
}

// -----

// The result of a binary op is exactly the broadcast shape.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x1xf32>
    %b = train.input "b" : tensor<3xf32>
    // expected-error @+1 {{'train.sub' op result 'tensor<2x1xf32>' is not the broadcast of lhs 'tensor<2x1xf32>' and rhs 'tensor<3xf32>'}}
    %c = train.sub %a, %b : tensor<2x1xf32>, tensor<3xf32> -> tensor<2x1xf32>
  }
}

// -----

// The one-type form of a binary op still checks the result's element type (generic form).
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2xf32>
    // expected-error @+1 {{'train.div' op operands and result must share one element type, got 'f32' and 'bf16'}}
    %c = "train.div"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xbf16>
  }
}

// -----

// matmul operands share one element type.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    %b = train.input "b" : tensor<4x3xbf16>
    // expected-error @+1 {{'train.matmul' op operands and result must share one element type, got 'f32' and 'bf16'}}
    %c = train.matmul %a, %b : tensor<2x4xf32>, tensor<4x3xbf16> -> tensor<2x3xf32>
  }
}

// -----

// matmul needs matrices.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<4xf32>
    %b = train.input "b" : tensor<4x3xf32>
    // expected-error @+1 {{'train.matmul' op operands must have rank >= 2: lhs 'tensor<4xf32>', rhs 'tensor<4x3xf32>'}}
    %c = train.matmul %a, %b : tensor<4xf32>, tensor<4x3xf32> -> tensor<3xf32>
  }
}

// -----

// matmul's contraction dims agree, and the message gives both.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    %b = train.input "b" : tensor<5x3xf32>
    // expected-error @+1 {{'train.matmul' op contraction dims differ (lhs K = 4, rhs K = 5): lhs 'tensor<2x4xf32>', rhs 'tensor<5x3xf32>'}}
    %c = train.matmul %a, %b : tensor<2x4xf32>, tensor<5x3xf32> -> tensor<2x3xf32>
  }
}

// -----

// Batched matmul needs equal batch dims.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3x4xf32>
    %b = train.input "b" : tensor<3x4x5xf32>
    // expected-error @+1 {{'train.matmul' op batch dims differ: lhs 'tensor<2x3x4xf32>', rhs 'tensor<3x4x5xf32>'}}
    %c = train.matmul %a, %b : tensor<2x3x4xf32>, tensor<3x4x5xf32> -> tensor<2x3x5xf32>
  }
}

// -----

// A batched rhs needs the same rank as lhs (no batch broadcasting).
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x2x3x4xf32>
    %b = train.input "b" : tensor<2x4x5xf32>
    // expected-error @+1 {{'train.matmul' op batch dims differ: lhs 'tensor<2x2x3x4xf32>', rhs 'tensor<2x4x5xf32>'}}
    %c = train.matmul %a, %b : tensor<2x2x3x4xf32>, tensor<2x4x5xf32> -> tensor<2x2x3x5xf32>
  }
}

// -----

// matmul's result shape is [..., M, N] and the message gives the expected shape.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    %b = train.input "b" : tensor<4x5xf32>
    // expected-error @+1 {{'train.matmul' op result 'tensor<2x4xf32>' should have shape [2, 5] for lhs 'tensor<2x4xf32>' and rhs 'tensor<4x5xf32>'}}
    %c = train.matmul %a, %b : tensor<2x4xf32>, tensor<4x5xf32> -> tensor<2x4xf32>
  }
}

// -----

// A transpose permutation has one entry per dim.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3x4xf32>
    // expected-error @+1 {{'train.transpose' op permutation has 2 entries for input 'tensor<2x3x4xf32>'}}
    %c = train.transpose %a [1, 0] : tensor<2x3x4xf32> -> tensor<3x2xf32>
  }
}

// -----

// A repeated dim is not a permutation.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    // expected-error @+1 {{'train.transpose' op [1, 1] is not a permutation of the dims of 'tensor<2x3xf32>'}}
    %c = train.transpose %a [1, 1] : tensor<2x3xf32> -> tensor<3x3xf32>
  }
}

// -----

// An out-of-range dim is not a permutation.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    // expected-error @+1 {{'train.transpose' op [0, 2] is not a permutation of the dims of 'tensor<2x3xf32>'}}
    %c = train.transpose %a [0, 2] : tensor<2x3xf32> -> tensor<2x3xf32>
  }
}

// -----

// The transpose result is the input permuted.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3x4xf32>
    // expected-error @+1 {{'train.transpose' op result 'tensor<2x4x3xf32>' is not input 'tensor<2x3x4xf32>' permuted by [2, 0, 1]}}
    %c = train.transpose %a [2, 0, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  }
}

// -----

// transpose keeps the element type.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    // expected-error @+1 {{'train.transpose' op changes the element type}}
    %c = train.transpose %a [1, 0] : tensor<2x3xf32> -> tensor<3x2xbf16>
  }
}

// -----

// reshape keeps the element count, and the message gives both counts.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    // expected-error @+1 {{'train.reshape' op cannot reshape 'tensor<2x3xf32>' (6 elements) to 'tensor<4xf32>' (4 elements)}}
    %c = train.reshape %a : tensor<2x3xf32> -> tensor<4xf32>
  }
}

// -----

// reshape keeps the element type.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xi32>
    // expected-error @+1 {{'train.reshape' op changes the element type from 'i32' to 'f32'}}
    %c = train.reshape %a : tensor<2x3xi32> -> tensor<6xf32>
  }
}

// -----

// broadcast follows NumPy rules.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<3xf32>
    // expected-error @+1 {{'train.broadcast' op input 'tensor<3xf32>' does not broadcast to 'tensor<2x4xf32>'}}
    %c = train.broadcast %a : tensor<3xf32> -> tensor<2x4xf32>
  }
}

// -----

// broadcast cannot drop dims.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    // expected-error @+1 {{'train.broadcast' op input 'tensor<2x3xf32>' does not broadcast to 'tensor<3xf32>'}}
    %c = train.broadcast %a : tensor<2x3xf32> -> tensor<3xf32>
  }
}

// -----

// broadcast keeps the element type.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<3xf32>
    // expected-error @+1 {{'train.broadcast' op changes the element type}}
    %c = train.broadcast %a : tensor<3xf32> -> tensor<2x3xbf16>
  }
}

// -----

// reduce_sum dims are increasing.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    // expected-error @+1 {{'train.reduce_sum' op dims [1, 0] must be increasing dims of 'tensor<2x3xf32>'}}
    %c = train.reduce_sum %a [1, 0] : tensor<2x3xf32> -> tensor<f32>
  }
}

// -----

// reduce_sum dims are dims of the input.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    // expected-error @+1 {{'train.reduce_sum' op dims [2] must be increasing dims of 'tensor<2x3xf32>'}}
    %c = train.reduce_sum %a [2] : tensor<2x3xf32> -> tensor<2x3xf32>
  }
}

// -----

// reduce_sum removes exactly the reduced dims.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    // expected-error @+1 {{'train.reduce_sum' op result 'tensor<2xf32>' is not 'tensor<2x3xf32>' with dims [0] removed}}
    %c = train.reduce_sum %a [0] : tensor<2x3xf32> -> tensor<2xf32>
  }
}

// -----

// reduce_sum keeps the element type.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    // expected-error @+1 {{'train.reduce_sum' op result 'tensor<3xbf16>' is not 'tensor<2x3xf32>' with dims [0] removed}}
    %c = train.reduce_sum %a [0] : tensor<2x3xf32> -> tensor<3xbf16>
  }
}

// -----

// slice keeps the element type.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    // expected-error @+1 {{'train.slice' op changes the element type}}
    %c = train.slice %a axis = 1 offset = 0 : tensor<2x4xf32> -> tensor<2x2xbf16>
  }
}

// -----

// A slice axis must be a dim of both input and result.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    // expected-error @+1 {{'train.slice' op axis 2 is not a dim of both 'tensor<2x2xf32>' and 'tensor<2x4xf32>'}}
    %c = train.slice %a axis = 2 offset = 0 : tensor<2x4xf32> -> tensor<2x2xf32>
  }
}

// -----

// slice cannot change the rank.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    // expected-error @+1 {{'train.slice' op axis 0 is not a dim of both 'tensor<4xf32>' and 'tensor<2x4xf32>'}}
    %c = train.slice %a axis = 0 offset = 0 : tensor<2x4xf32> -> tensor<4xf32>
  }
}

// -----

// A slice changes only the dim along its axis.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<3x4xf32>
    // expected-error @+1 {{'train.slice' op 'tensor<2x2xf32>' and 'tensor<3x4xf32>' differ in dim 0, not only along axis 1}}
    %c = train.slice %a axis = 1 offset = 0 : tensor<3x4xf32> -> tensor<2x2xf32>
  }
}

// -----

// A slice window stays inside the input.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    // expected-error @+1 {{'train.slice' op window of 2 at offset 3 along axis 1 is outside 'tensor<2x4xf32>'}}
    %c = train.slice %a axis = 1 offset = 3 : tensor<2x4xf32> -> tensor<2x2xf32>
  }
}

// -----

// A slice offset is not negative.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    // expected-error @+1 {{'train.slice' op window of 2 at offset -1 along axis 1 is outside 'tensor<2x4xf32>'}}
    %c = train.slice %a axis = 1 offset = -1 : tensor<2x4xf32> -> tensor<2x2xf32>
  }
}

// -----

// pad keeps the element type.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x2xf32>
    // expected-error @+1 {{'train.pad' op changes the element type}}
    %c = train.pad %a axis = 1 offset = 0 : tensor<2x2xf32> -> tensor<2x4xbf16>
  }
}

// -----

// A pad axis must be a dim of both input and result.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x2xf32>
    // expected-error @+1 {{'train.pad' op axis -1 is not a dim of both 'tensor<2x2xf32>' and 'tensor<2x4xf32>'}}
    %c = train.pad %a axis = -1 offset = 0 : tensor<2x2xf32> -> tensor<2x4xf32>
  }
}

// -----

// A pad changes only the dim along its axis.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x2xf32>
    // expected-error @+1 {{'train.pad' op 'tensor<2x2xf32>' and 'tensor<3x4xf32>' differ in dim 0, not only along axis 1}}
    %c = train.pad %a axis = 1 offset = 0 : tensor<2x2xf32> -> tensor<3x4xf32>
  }
}

// -----

// The padded input must fit inside the result.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x2xf32>
    // expected-error @+1 {{'train.pad' op window of 2 at offset 3 along axis 1 is outside 'tensor<2x4xf32>'}}
    %c = train.pad %a axis = 1 offset = 3 : tensor<2x2xf32> -> tensor<2x4xf32>
  }
}

// -----

// softmax needs a dim to normalise over.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<f32>
    // expected-error @+1 {{'train.softmax' op needs rank >= 1, got 'tensor<f32>'}}
    %c = train.softmax %a : tensor<f32>
  }
}

// -----

// Causal softmax needs square trailing dims.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3x4xf32>
    // expected-error @+1 {{'train.softmax' op causal softmax needs [..., T, T], got 'tensor<2x3x4xf32>'}}
    %c = train.softmax %a causal : tensor<2x3x4xf32>
  }
}

// -----

// Causal softmax needs rank >= 2.
train.model @m {
  train.step {
    %a = train.input "a" : tensor<4xf32>
    // expected-error @+1 {{'train.softmax' op causal softmax needs [..., T, T], got 'tensor<4xf32>'}}
    %c = train.softmax %a causal : tensor<4xf32>
  }
}

// -----

// layer_norm's gamma has the input's last dim.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<3xf32>
    %b = train.input "b" : tensor<4xf32>
    // expected-error @+1 {{'train.layer_norm' op gamma 'tensor<3xf32>' must have shape [4] to match the last dim of input 'tensor<2x4xf32>'}}
    %c = train.layer_norm %x, %g, %b : tensor<2x4xf32>, tensor<3xf32>, tensor<4xf32>
  }
}

// -----

// layer_norm's beta has the input's last dim and rank 1.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    %b = train.input "b" : tensor<1x4xf32>
    // expected-error @+1 {{'train.layer_norm' op beta 'tensor<1x4xf32>' must have shape [4] to match the last dim of input 'tensor<2x4xf32>'}}
    %c = train.layer_norm %x, %g, %b : tensor<2x4xf32>, tensor<4xf32>, tensor<1x4xf32>
  }
}

// -----

// layer_norm needs an input of rank >= 1.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<f32>
    %g = train.input "g" : tensor<1xf32>
    // expected-error @+1 {{'train.layer_norm' op input must have rank >= 1, got 'tensor<f32>'}}
    %c = train.layer_norm %x, %g, %g : tensor<f32>, tensor<1xf32>, tensor<1xf32>
  }
}

// -----

// layer_norm's operands share one element type.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xbf16>
    %b = train.input "b" : tensor<4xf32>
    // expected-error @+1 {{'train.layer_norm' op input, gamma, beta and result must share one element type, got 'f32' and 'bf16'}}
    %c = train.layer_norm %x, %g, %b : tensor<2x4xf32>, tensor<4xbf16>, tensor<4xf32>
  }
}

// -----

// layer_norm's eps is positive.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    // expected-error @+1 {{'train.layer_norm' op eps must be positive}}
    %c = train.layer_norm %x, %g, %g {eps = 0.0 : f64} : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
  }
}

// -----

// layer_norm's result has the input's type (the ODS trait, generic form).
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    // expected-error @+1 {{'train.layer_norm' op failed to verify that all of {input, result} have same type}}
    %c = "train.layer_norm"(%x, %g, %g) : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4x2xf32>
  }
}

// -----

// rms_norm's gamma has the input's last dim.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<2xf32>
    // expected-error @+1 {{'train.rms_norm' op gamma 'tensor<2xf32>' must have shape [4] to match the last dim of input 'tensor<2x4xf32>'}}
    %c = train.rms_norm %x, %g : tensor<2x4xf32>, tensor<2xf32>
  }
}

// -----

// rms_norm's operands share one element type.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xbf16>
    %g = train.input "g" : tensor<4xf32>
    // expected-error @+1 {{'train.rms_norm' op input, gamma and result must share one element type, got 'bf16' and 'f32'}}
    %c = train.rms_norm %x, %g : tensor<2x4xbf16>, tensor<4xf32>
  }
}

// -----

// rms_norm's eps is positive.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    // expected-error @+1 {{'train.rms_norm' op eps must be positive}}
    %c = train.rms_norm %x, %g {eps = -1.0e-5 : f64} : tensor<2x4xf32>, tensor<4xf32>
  }
}

// -----

// attention works on [B, H, T, D].
train.model @m {
  train.step {
    %q = train.input "q" : tensor<2x3x4xf32>
    // expected-error @+1 {{'train.attention' op q must be [B, H, T, D], got 'tensor<2x3x4xf32>'}}
    %c = train.attention %q, %q, %q {scale = 0.5 : f64} : tensor<2x3x4xf32>
  }
}

// -----

// attention_grad's result stacks dq, dk and dv: [3, B, H, T, D].
train.model @m {
  train.step {
    %q = train.input "q" : tensor<1x2x3x4xf32>
    // expected-error @+1 {{'train.attention_grad' op result 'tensor<1x2x3x4xf32>' should stack dq, dk and dv of 'tensor<1x2x3x4xf32>' as 'tensor<3x1x2x3x4xf32>'}}
    %c = train.attention_grad %q, %q, %q, %q {scale = 0.5 : f64} : tensor<1x2x3x4xf32> -> tensor<1x2x3x4xf32>
  }
}

// -----

// norm_grad stacks dx's rows, dgamma and (centered) dbeta: [R + 2, D].
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %g = train.input "g" : tensor<4xf32>
    // expected-error @+1 {{'train.norm_grad' op result 'tensor<7x4xf32>' should stack 6 rows of dx, dgamma and dbeta as 'tensor<8x4xf32>'}}
    %c = train.norm_grad %x, %g, %x centered {eps = 1.0e-5 : f64} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<7x4xf32>
  }
}

// -----

// RmsNorm's (not centered) has no dbeta row.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    // expected-error @+1 {{'train.norm_grad' op result 'tensor<4x4xf32>' should stack 2 rows of dx, dgamma as 'tensor<3x4xf32>'}}
    %c = train.norm_grad %x, %g, %x {eps = 1.0e-5 : f64} : tensor<2x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
  }
}

// -----

// norm_grad's addend (kernel-norm-grad-epilogue) has the input's type.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<4xf32>
    %r = train.input "r" : tensor<8xf32>
    // expected-error @+1 {{'train.norm_grad' op addend 'tensor<8xf32>' must have the input's type 'tensor<2x4xf32>'}}
    %c = train.norm_grad %x, %g, %x plus %r : tensor<8xf32> centered {eps = 1.0e-5 : f64} : tensor<2x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
  }
}

// -----

// norm_grad's gamma holds the D features.
train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.input "g" : tensor<3xf32>
    // expected-error @+1 {{'train.norm_grad' op gamma 'tensor<3xf32>' must hold the 4 features of 'tensor<2x4xf32>'}}
    %c = train.norm_grad %x, %g, %x centered {eps = 1.0e-5 : f64} : tensor<2x4xf32>, tensor<3xf32> -> tensor<4x4xf32>
  }
}

// -----

// attention_grad works on [B, H, T, D].
train.model @m {
  train.step {
    %q = train.input "q" : tensor<3x4xf32>
    // expected-error @+1 {{'train.attention_grad' op q must be [B, H, T, D], got 'tensor<3x4xf32>'}}
    %c = train.attention_grad %q, %q, %q, %q {scale = 0.5 : f64} : tensor<3x4xf32> -> tensor<3x3x4xf32>
  }
}

// -----

// attention_grad's q, k, v and grad share one type (the ODS trait, generic form).
train.model @m {
  train.step {
    %q = train.input "q" : tensor<1x2x3x4xf32>
    %g = train.input "g" : tensor<1x2x5x4xf32>
    // expected-error @+1 {{'train.attention_grad' op failed to verify that all of {q, k, v, grad} have same type}}
    %c = "train.attention_grad"(%q, %q, %q, %g) <{scale = 0.5 : f64}> : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>) -> tensor<3x1x2x3x4xf32>
  }
}

// -----

// attention's q, k, v and result share one type (the ODS trait, generic form).
train.model @m {
  train.step {
    %q = train.input "q" : tensor<1x2x3x4xf32>
    %k = train.input "k" : tensor<1x2x5x4xf32>
    // expected-error @+1 {{'train.attention' op failed to verify that all of {q, k, v, result} have same type}}
    %c = "train.attention"(%q, %k, %k) <{scale = 0.5 : f64}> : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x3x4xf32>
  }
}

// -----

// An embedding table is [V, D].
train.model @m {
  train.step {
    %t = train.input "t" : tensor<8xf32>
    %i = train.input "i" : tensor<2xi32>
    // expected-error @+1 {{'train.embedding' op table must be [V, D], got 'tensor<8xf32>'}}
    %c = train.embedding %t[%i] : tensor<8xf32>, tensor<2xi32> -> tensor<2xf32>
  }
}

// -----

// An embedding result is the ids' shape plus D.
train.model @m {
  train.step {
    %t = train.input "t" : tensor<8x4xf32>
    %i = train.input "i" : tensor<2x3xi32>
    // expected-error @+1 {{'train.embedding' op result 'tensor<2x3x8xf32>' should be ids 'tensor<2x3xi32>' with a trailing dim of 4 from table 'tensor<8x4xf32>'}}
    %c = train.embedding %t[%i] : tensor<8x4xf32>, tensor<2x3xi32> -> tensor<2x3x8xf32>
  }
}

// -----

// An embedding result has the table's element type.
train.model @m {
  train.step {
    %t = train.input "t" : tensor<8x4xf32>
    %i = train.input "i" : tensor<3xi32>
    // expected-error @+1 {{'train.embedding' op result 'tensor<3x4xbf16>' should be ids 'tensor<3xi32>' with a trailing dim of 4 from table 'tensor<8x4xf32>'}}
    %c = train.embedding %t[%i] : tensor<8x4xf32>, tensor<3xi32> -> tensor<3x4xbf16>
  }
}

// -----

// scatter_rows produces a [V, D] table.
train.model @m {
  train.step {
    %u = train.input "u" : tensor<3x4xf32>
    %i = train.input "i" : tensor<3xi32>
    // expected-error @+1 {{'train.scatter_rows' op result must be [V, D], got 'tensor<8x4x1xf32>'}}
    %c = train.scatter_rows %u into rows[%i] : tensor<3x4xf32>, tensor<3xi32> -> tensor<8x4x1xf32>
  }
}

// -----

// scatter_rows updates are the ids' shape plus D.
train.model @m {
  train.step {
    %u = train.input "u" : tensor<3x4xf32>
    %i = train.input "i" : tensor<2x3xi32>
    // expected-error @+1 {{'train.scatter_rows' op updates 'tensor<3x4xf32>' should be ids 'tensor<2x3xi32>' with a trailing dim of 4}}
    %c = train.scatter_rows %u into rows[%i] : tensor<3x4xf32>, tensor<2x3xi32> -> tensor<8x4xf32>
  }
}

// -----

// one_hot adds exactly one trailing class dim.
train.model @m {
  train.step {
    %i = train.input "i" : tensor<2x3xi32>
    // expected-error @+1 {{'train.one_hot' op result 'tensor<3x8xf32>' should be ids 'tensor<2x3xi32>' with one trailing class dim}}
    %c = train.one_hot %i : tensor<2x3xi32> -> tensor<3x8xf32>
  }
}

// -----

// one_hot keeps the ids' leading dims.
train.model @m {
  train.step {
    %i = train.input "i" : tensor<2x3xi32>
    // expected-error @+1 {{'train.one_hot' op result 'tensor<3x2x8xf32>' should be ids 'tensor<2x3xi32>' with one trailing class dim}}
    %c = train.one_hot %i : tensor<2x3xi32> -> tensor<3x2x8xf32>
  }
}

// -----

// cross_entropy targets are the logits without the class dim.
train.model @m {
  train.step {
    %l = train.input "l" : tensor<2x3x5xf32>
    %t = train.input "t" : tensor<2x5xi32>
    // expected-error @+1 {{'train.cross_entropy' op targets 'tensor<2x5xi32>' must be logits 'tensor<2x3x5xf32>' without the class dim}}
    %c = train.cross_entropy %l, %t : tensor<2x3x5xf32>, tensor<2x5xi32> -> tensor<f32>
  }
}

// -----

// cross_entropy needs logits with a class dim.
train.model @m {
  train.step {
    %l = train.input "l" : tensor<f32>
    %t = train.input "t" : tensor<i32>
    // expected-error @+1 {{'train.cross_entropy' op targets 'tensor<i32>' must be logits 'tensor<f32>' without the class dim}}
    %c = train.cross_entropy %l, %t : tensor<f32>, tensor<i32> -> tensor<f32>
  }
}

// -----

// cross_entropy's loss has the logits' element type.
train.model @m {
  train.step {
    %l = train.input "l" : tensor<2x5xf32>
    %t = train.input "t" : tensor<2xi32>
    // expected-error @+1 {{'train.cross_entropy' op result 'tensor<bf16>' must have the element type of logits 'tensor<2x5xf32>'}}
    %c = train.cross_entropy %l, %t : tensor<2x5xf32>, tensor<2xi32> -> tensor<bf16>
  }
}

// -----

// newton_schulz orthogonalises matrices only.
train.model @m {
  train.step {
    %g = train.input "g" : tensor<2x4x4xf32>
    // expected-error @+1 {{'train.newton_schulz' op needs a matrix, got 'tensor<2x4x4xf32>'}}
    %c = train.newton_schulz %g : tensor<2x4x4xf32>
  }
}

// -----

// newton_schulz needs at least one iteration.
train.model @m {
  train.step {
    %g = train.input "g" : tensor<4x4xf32>
    // expected-error @+1 {{'train.newton_schulz' op needs steps >= 1, got 0}}
    %c = train.newton_schulz %g {steps = 0 : i64} : tensor<4x4xf32>
  }
}

// -----

// newton_schulz_batch stacks two or more matrices.
train.model @m {
  train.step {
    %g = train.input "g" : tensor<4x8xf32>
    // expected-error @+1 {{'train.newton_schulz_batch' op needs at least two matrices, got 1}}
    %c = train.newton_schulz_batch %g : tensor<4x8xf32> -> tensor<1x4x8xf32>
  }
}

// -----

// newton_schulz_batch's matrices are of one type.
train.model @m {
  train.step {
    %g = train.input "g" : tensor<4x8xf32>
    %h = train.input "h" : tensor<8x4xf32>
    // expected-error @+1 {{'train.newton_schulz_batch' op needs matrices of one type: input 1 is 'tensor<8x4xf32>', input 0 'tensor<4x8xf32>'}}
    %c = train.newton_schulz_batch %g, %h : tensor<4x8xf32>, tensor<8x4xf32> -> tensor<2x4x8xf32>
  }
}

// -----

// newton_schulz_batch's inputs are matrices.
train.model @m {
  train.step {
    %g = train.input "g" : tensor<2x4x8xf32>
    // expected-error @+1 {{'train.newton_schulz_batch' op needs matrices, got 'tensor<2x4x8xf32>'}}
    %c = train.newton_schulz_batch %g, %g : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x2x4x8xf32>
  }
}

// -----

// newton_schulz_batch's result is its inputs' results stacked.
train.model @m {
  train.step {
    %g = train.input "g" : tensor<4x8xf32>
    // expected-error @+1 {{'train.newton_schulz_batch' op result must be the 3 matrices stacked, 'tensor<3x4x8xf32>', got 'tensor<2x4x8xf32>'}}
    %c = train.newton_schulz_batch %g, %g, %g : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
  }
}

// -----

// newton_schulz_batch needs at least one iteration.
train.model @m {
  train.step {
    %g = train.input "g" : tensor<4x8xf32>
    // expected-error @+1 {{'train.newton_schulz_batch' op needs steps >= 1, got 0}}
    %c = train.newton_schulz_batch %g, %g {steps = 0 : i64} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
  }
}

// -----

// A transpose result of another rank than the permutation (found by fuzzing:
// the verifier used to index past the result's dims).
train.model @transpose_rank {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    // expected-error @+1 {{'train.transpose' op result 'tensor<3x4xf32>' has rank 2, the permutation 3}}
    %t = train.transpose %x [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4xf32>
    %l = train.reduce_sum %t [0, 1] : tensor<3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A reshape between types whose element counts overflow 64 bits is rejected,
// not compared modulo 2^64 (found by fuzzing).
train.model @reshape_overflow {
  train.step {
    %x = train.input "x" : tensor<4611686018427387904x4xf32>
    // expected-error @+1 {{'train.reshape' op type 'tensor<4611686018427387904x4xf32>' has more elements than fit in 64 bits}}
    %r = train.reshape %x : tensor<4611686018427387904x4xf32> -> tensor<0xf32>
    %l = train.reduce_sum %r [0] : tensor<0xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// stage_sum adds scalars (one partial per pipeline stage).
train.model @m {
  train.step {
    %g = train.input "g" : tensor<4xf32>
    // expected-error @+1 {{'train.stage_sum' op sums scalars: the result must be a rank-0 tensor, got 'tensor<4xf32>'}}
    %s = train.stage_sum %g, %g : tensor<4xf32>
  }
}

// -----

// stage_sum needs its partials.
train.model @m {
  train.step {
    // expected-error @+1 {{'train.stage_sum' op expected 1 or more operands, but found 0}}
    %s = train.stage_sum : tensor<f32>
  }
}

// -----

// train.erf (GELU's exact form) is element-wise on floats: token ids are
// refused, and the result keeps the operand's type.
train.model @m {
  train.step {
    %ids = train.input "tokens" : tensor<2x3xi32>
    // expected-error @+1 {{'train.erf' op operand #0 must be ranked tensor of 32-bit float or bfloat16 type or 64-bit float values, but got 'tensor<2x3xi32>'}}
    %e = train.erf %ids : tensor<2x3xi32>
  }
}

// -----

train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    // expected-error @+1 {{'train.erf' op requires the same type for all operands and results}}
    %e = "train.erf"(%x) : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  }
}
