train.model @m {
  train.param @w : tensor<4xf32> = zeros(0.0)
  train.step {
    %v = train.read @v : tensor<4xf32>
    %l = train.reduce_sum %v [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
