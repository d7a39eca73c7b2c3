train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %c = train.reshape %a : tensor<2x3xf32> -> tensor<4xf32>
  }
}
