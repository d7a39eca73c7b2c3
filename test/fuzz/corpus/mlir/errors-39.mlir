train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3x4xf32>
    %c = train.transpose %a [1, 0] : tensor<2x3x4xf32> -> tensor<3x2xf32>
  }
}
