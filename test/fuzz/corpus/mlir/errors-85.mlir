train.model @m {
  train.step {
    %l = train.input "l" : tensor<f32>
    %t = train.input "t" : tensor<i32>
    %c = train.cross_entropy %l, %t : tensor<f32>, tensor<i32> -> tensor<f32>
  }
}
