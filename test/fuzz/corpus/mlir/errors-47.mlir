train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3xf32>
    %c = train.broadcast %a : tensor<2x3xf32> -> tensor<3xf32>
  }
}
