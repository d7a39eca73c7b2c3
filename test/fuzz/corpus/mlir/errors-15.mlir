train.model @m {
  train.param @w : tensor<4xf32> = normal(0.0)
}
