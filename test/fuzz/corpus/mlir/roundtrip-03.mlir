train.model @state {
  train.param @w : tensor<4x4xf32> = normal(0.1)
  train.state @w.m : tensor<4x4xf32> = zeros {of = @w}
  train.step {
    %w = train.read @w : tensor<4x4xf32>
    %m = train.read @w.m : tensor<4x4xf32>
    %t = train.step_count : tensor<f32>
    train.grad %w for @w : tensor<4x4xf32>
    train.write %m to @w : tensor<4x4xf32>
    train.write %w to @w.m : tensor<4x4xf32>
    %l = train.reduce_sum %w [0, 1] : tensor<4x4xf32> -> tensor<f32>
    train.yield %l, %t : tensor<f32>, tensor<f32>
  }
}
