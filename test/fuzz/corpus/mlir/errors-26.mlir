train.model @m {
  train.state @s : tensor<4xf32> = zeros(0.0)
  train.step {
    %s = train.read @s : tensor<4xf32>
    train.grad %s for @s : tensor<4xf32>
    %l = train.reduce_sum %s [0] : tensor<4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
