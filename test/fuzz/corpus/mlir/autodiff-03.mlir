train.model @matmul_batched {
  train.param @a : tensor<2x3x4xf32> = normal(0.1)
  train.param @b : tensor<2x4x5xf32> = normal(0.1)
  train.step {
    %a = train.read @a : tensor<2x3x4xf32>
    %b = train.read @b : tensor<2x4x5xf32>
    %y = train.matmul %a, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32> -> tensor<2x3x5xf32>
    %l = train.reduce_sum %y [0, 1, 2] : tensor<2x3x5xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
