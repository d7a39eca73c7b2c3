train.model @matmul_batched_lhs_grad {
  train.param @x : tensor<2x5x4xf32> = normal(0.1)
  train.step {
    %x = train.read @x : tensor<2x5x4xf32>
    %w = train.input "w" : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<2x5x4xf32>, tensor<4x3xf32> -> tensor<2x5x3xf32>
    %l = train.reduce_sum %y [0, 1, 2] : tensor<2x5x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
