train.model @m {
  train.step {
    %a = train.input "a" : tensor<f32>
    %c = train.softmax %a : tensor<f32>
  }
}
