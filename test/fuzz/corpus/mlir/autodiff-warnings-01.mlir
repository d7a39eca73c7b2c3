train.model @unreached {
  train.param @unused : tensor<3xf32> = zeros
  train.param @w : tensor<3xf32> = zeros
  train.param @metric : tensor<3xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %w = train.read @w : tensor<3xf32>
    %m = train.read @metric : tensor<3xf32>
    %y = train.mul %w, %x : tensor<3xf32>
    %l = train.reduce_sum %y [0] : tensor<3xf32> -> tensor<f32>
    %ml = train.reduce_sum %m [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l, %ml : tensor<f32>, tensor<f32>
  }
}
