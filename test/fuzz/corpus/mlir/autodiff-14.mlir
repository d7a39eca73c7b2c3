train.model @attention_noncausal {
  train.param @q : tensor<1x1x2x2xf32> = normal(1.0)
  train.step {
    %q = train.read @q : tensor<1x1x2x2xf32>
    %o = train.attention %q, %q, %q {scale = 0.25 : f64} : tensor<1x1x2x2xf32>
    %l = train.reduce_sum %o [0, 1, 2, 3] : tensor<1x1x2x2xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
