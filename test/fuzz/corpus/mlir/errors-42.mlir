train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3x4xf32>
    %c = train.transpose %a [2, 0, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  }
}
