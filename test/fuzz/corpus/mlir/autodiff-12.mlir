train.model @softmax {
  train.param @w : tensor<3x3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3x3xf32>
    %y = train.softmax %w causal : tensor<3x3xf32>
    %t = train.input "t" : tensor<3x3xf32>
    %z = train.mul %y, %t : tensor<3x3xf32>
    %l = train.reduce_sum %z [0, 1] : tensor<3x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
