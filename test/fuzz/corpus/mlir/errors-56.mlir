train.model @m {
  train.step {
    %a = train.input "a" : tensor<3x4xf32>
    %c = train.slice %a axis = 1 offset = 0 : tensor<3x4xf32> -> tensor<2x2xf32>
  }
}
