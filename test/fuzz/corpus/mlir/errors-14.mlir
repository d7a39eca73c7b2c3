train.model @m {
  train.state @s : tensor<4x?xf32> = zeros(0.0)
}
