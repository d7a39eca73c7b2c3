train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %c = train.transpose %a [1, 0] : tensor<2x3xf32> -> tensor<3x2xbf16>
  }
}
