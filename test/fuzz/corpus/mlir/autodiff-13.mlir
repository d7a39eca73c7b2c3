train.model @attention {
  train.param @q : tensor<1x2x3x4xf32> = normal(1.0)
  train.param @k : tensor<1x2x3x4xf32> = normal(1.0)
  train.param @v : tensor<1x2x3x4xf32> = normal(1.0)
  train.step {
    %q = train.read @q : tensor<1x2x3x4xf32>
    %k = train.read @k : tensor<1x2x3x4xf32>
    %v = train.read @v : tensor<1x2x3x4xf32>
    %o = train.attention %q, %k, %v causal {scale = 0.5 : f64} : tensor<1x2x3x4xf32>
    %l = train.reduce_sum %o [0, 1, 2, 3] : tensor<1x2x3x4xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
