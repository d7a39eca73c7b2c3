train.model @m {
  train.step {
    %a = train.input "a" : tensor<2x3x4xf32>
    %c = train.softmax %a causal : tensor<2x3x4xf32>
  }
}
