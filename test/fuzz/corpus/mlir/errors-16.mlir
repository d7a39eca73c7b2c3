train.model @m {
  train.state @s : tensor<4xf32> = uniform(-1.0)
}
