train.model @m {
  train.step {
    %a = train.input "a" : tensor<4xf32>
    %c = train.softmax %a causal : tensor<4xf32>
  }
}
