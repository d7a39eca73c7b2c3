// RUN: stretto-opt %s -split-input-file -verify-diagnostics --train-partition

// An unknown unit name is reported with the stage and the model's units.
// expected-error @+1 {{stage_units: stage 1 ('blok1..head') names unknown unit 'blok1'; the units are embed, block0, ..., head}}
train.model @m0 attributes {trainer = {stages = 2, stage_units = ["embed..block0", "blok1..head"]}} {
  train.param @e : tensor<2x2xf32> = normal(0.1) {role = "embedding"}
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @h : tensor<2x2xf32> = normal(0.1) {role = "head"}
  train.step {
    %e = train.read @e : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.read @h : tensor<2x2xf32>
    %x = train.matmul %e, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %x, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %z = train.matmul %y, %h : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Stages that overlap.
// expected-error @+1 {{stage_units: stage 1 is 'block0..head' but it overlaps the previous stage, which ends at block0}}
train.model @m1 attributes {trainer = {stages = 2, stage_units = ["embed..block0", "block0..head"]}} {
  train.param @e : tensor<2x2xf32> = normal(0.1) {role = "embedding"}
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @h : tensor<2x2xf32> = normal(0.1) {role = "head"}
  train.step {
    %e = train.read @e : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.read @h : tensor<2x2xf32>
    %x = train.matmul %e, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %x, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %z = train.matmul %y, %h : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A gap between stages.
// expected-error @+1 {{stage_units: stage 1 is 'block1..head' but units block0..block0 belong to no stage}}
train.model @m2 attributes {trainer = {stages = 2, stage_units = ["embed", "block1..head"]}} {
  train.param @e : tensor<2x2xf32> = normal(0.1) {role = "embedding"}
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @h : tensor<2x2xf32> = normal(0.1) {role = "head"}
  train.step {
    %e = train.read @e : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.read @h : tensor<2x2xf32>
    %x = train.matmul %e, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %x, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %z = train.matmul %y, %h : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// A range written backwards.
// expected-error @+1 {{stage_units: stage 1 is 'head..block1' but block1 comes before head}}
train.model @m3 attributes {trainer = {stages = 2, stage_units = ["embed..block0", "head..block1"]}} {
  train.param @e : tensor<2x2xf32> = normal(0.1) {role = "embedding"}
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @h : tensor<2x2xf32> = normal(0.1) {role = "head"}
  train.step {
    %e = train.read @e : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.read @h : tensor<2x2xf32>
    %x = train.matmul %e, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %x, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %z = train.matmul %y, %h : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Units left over at the end.
// expected-error @+1 {{stage_units: units head..head belong to no stage}}
train.model @m4 attributes {trainer = {stages = 2, stage_units = ["embed", "block0..block1"]}} {
  train.param @e : tensor<2x2xf32> = normal(0.1) {role = "embedding"}
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @h : tensor<2x2xf32> = normal(0.1) {role = "head"}
  train.step {
    %e = train.read @e : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.read @h : tensor<2x2xf32>
    %x = train.matmul %e, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %x, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %z = train.matmul %y, %h : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// As many entries as stages.
// expected-error @+1 {{stage_units gives 1 stage(s) for 2 stage(s)}}
train.model @m5 attributes {trainer = {stages = 2, stage_units = ["embed..head"]}} {
  train.param @e : tensor<2x2xf32> = normal(0.1) {role = "embedding"}
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @h : tensor<2x2xf32> = normal(0.1) {role = "head"}
  train.step {
    %e = train.read @e : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.read @h : tensor<2x2xf32>
    %x = train.matmul %e, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %x, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %z = train.matmul %y, %h : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// Units and layer ranges together are ambiguous.
// expected-error @+1 {{the trainer gives both stage_units and stage_ranges; give one}}
train.model @m6 attributes {trainer = {stages = 2, stage_units = ["embed..block0", "block1..head"], stage_ranges = [[0, 1], [1, 2]]}} {
  train.param @e : tensor<2x2xf32> = normal(0.1) {role = "embedding"}
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @h : tensor<2x2xf32> = normal(0.1) {role = "head"}
  train.step {
    %e = train.read @e : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.read @h : tensor<2x2xf32>
    %x = train.matmul %e, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %x, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %z = train.matmul %y, %h : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// More stages than units.
// expected-error @+1 {{cannot split 4 partition unit(s) into 5 stage(s)}}
train.model @m7 attributes {trainer = {stages = 5, stage_units = ["embed", "block0", "block1", "head", "head"]}} {
  train.param @e : tensor<2x2xf32> = normal(0.1) {role = "embedding"}
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @h : tensor<2x2xf32> = normal(0.1) {role = "head"}
  train.step {
    %e = train.read @e : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.read @h : tensor<2x2xf32>
    %x = train.matmul %e, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %x, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %z = train.matmul %y, %h : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// -----

// The trainer schema: stage_units must be strings.
// expected-error @+1 {{'train.model' op trainer option 'stage_units' must be a list of "first..last" unit names, one per stage, got [1, 2]}}
train.model @schema attributes {trainer = {stages = 2, stage_units = [1, 2]}} {
  train.param @e : tensor<2x2xf32> = normal(0.1) {role = "embedding"}
  train.param @a : tensor<2x2xf32> = normal(0.1) {layer = 0 : i64}
  train.param @b : tensor<2x2xf32> = normal(0.1) {layer = 1 : i64}
  train.param @h : tensor<2x2xf32> = normal(0.1) {role = "head"}
  train.step {
    %e = train.read @e : tensor<2x2xf32>
    %a = train.read @a : tensor<2x2xf32>
    %b = train.read @b : tensor<2x2xf32>
    %h = train.read @h : tensor<2x2xf32>
    %x = train.matmul %e, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %y = train.matmul %x, %b : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %z = train.matmul %y, %h : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
