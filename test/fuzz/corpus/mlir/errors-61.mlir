train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x2xf32>
    %c = train.pad %a axis = 1 offset = 0 : tensor<2x2xf32> -> tensor<3x4xf32>
  }
}
