train.model @no_step {
  train.param @w : tensor<3xf32> = normal(1.0)
}
