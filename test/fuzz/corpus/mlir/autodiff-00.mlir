train.model @matmul {
  train.param @a : tensor<2x3xf32> = normal(0.1)
  train.param @b : tensor<3x4xf32> = normal(0.1)
  train.step {
    %a = train.read @a : tensor<2x3xf32>
    %b = train.read @b : tensor<3x4xf32>
    %y = train.matmul %a, %b : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
