// RUN: stretto-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(train.model(train-partition{stages=2 unit-costs=1,2,3}))'

// Measured costs must name every unit.
// expected-error @+1 {{unit-costs gives 3 cost(s) for the 4 partition units (embed, block0, ..., head)}}
train.model @costs attributes {trainer = {stages = 2}} {
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
