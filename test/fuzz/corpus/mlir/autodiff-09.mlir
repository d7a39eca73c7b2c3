train.model @layer_norm_params {
  train.param @g : tensor<4xf32> = ones
  train.param @b : tensor<4xf32> = zeros
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %g = train.read @g : tensor<4xf32>
    %b = train.read @b : tensor<4xf32>
    %y = train.layer_norm %x, %g, %b {eps = 1.0e-3 : f64} : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
    %l = train.reduce_sum %y [0, 1] : tensor<2x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
