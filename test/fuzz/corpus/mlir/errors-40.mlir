train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %c = train.transpose %a [1, 1] : tensor<2x3xf32> -> tensor<3x3xf32>
  }
}
