train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x4xf32>
    %c = train.slice %a axis = 1 offset = 3 : tensor<2x4xf32> -> tensor<2x2xf32>
  }
}
