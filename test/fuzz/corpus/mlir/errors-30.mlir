train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %b = train.input "b" : tensor<4xf32>
    %c = train.mul %a, %b : tensor<2x3xf32>, tensor<4xf32> -> tensor<2x3xf32>
  }
}
