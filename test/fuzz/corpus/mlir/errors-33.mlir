train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    %b = train.input "b" : tensor<4x3xbf16>
    %c = train.matmul %a, %b : tensor<2x4xf32>, tensor<4x3xbf16> -> tensor<2x3xf32>
  }
}
