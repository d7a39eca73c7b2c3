train.model @broadcast_identity {
  train.step {
    %x = train.input "x" : tensor<3xf32>
    %same = train.broadcast %x : tensor<3xf32> -> tensor<3xf32>
    %big = train.broadcast %x : tensor<3xf32> -> tensor<2x3xf32>
    %s = train.add %big, %same : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %l = train.reduce_sum %s [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
