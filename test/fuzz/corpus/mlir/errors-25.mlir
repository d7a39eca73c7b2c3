train.model @m {
  train.param @w : tensor<4xf32> = zeros(0.0)
  train.step {
    %x = train.input "x" : tensor<5xf32>
    train.grad %x for @w : tensor<5xf32>
    %l = train.reduce_sum %x [0] : tensor<5xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
