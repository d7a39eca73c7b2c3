train.model @m {
  train.param @w : tensor<4x4xf32> = normal(0.02) {role = "weights"}
}
