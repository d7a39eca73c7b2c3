train.model @layout {
  train.param @w : tensor<2x3x4xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<2x3x4xf32>
    %r = train.reshape %w : tensor<2x3x4xf32> -> tensor<6x4xf32>
    %t = train.transpose %r [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
    %s = train.slice %t axis = 1 offset = 2 : tensor<4x6xf32> -> tensor<4x3xf32>
    %p = train.pad %s axis = 0 offset = 1 : tensor<4x3xf32> -> tensor<7x3xf32>
    %l = train.reduce_sum %p [0, 1] : tensor<7x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
