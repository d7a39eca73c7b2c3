train.model @m {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %s = train.slice %x axis = 1 offset = 9223372036854775807 : tensor<2x3xf32> -> tensor<2x1xf32>
    %l = train.reduce_sum %s [0, 1] : tensor<2x1xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
