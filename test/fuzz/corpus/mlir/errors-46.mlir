train.model @m {
  train.step {
    %a = train.input "a" : tensor<3xf32>
    %c = train.broadcast %a : tensor<3xf32> -> tensor<2x4xf32>
  }
}
