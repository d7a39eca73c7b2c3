train.model @m {
  train.param @w : tensor<?x4xf32> = zeros(0.0)
}
