train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %b = train.input "b" : tensor<2x3xbf16>
    %c = train.add %a, %b : tensor<2x3xf32>, tensor<2x3xbf16> -> tensor<2x3xf32>
  }
}
