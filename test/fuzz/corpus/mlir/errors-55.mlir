train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    %c = train.slice %a axis = 0 offset = 0 : tensor<2x4xf32> -> tensor<4xf32>
  }
}
