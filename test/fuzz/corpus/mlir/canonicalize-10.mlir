train.model @transpose_compose_shared {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %t1 = train.transpose %x [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
    %t2 = train.transpose %t1 [1, 0] : tensor<3x2xf32> -> tensor<2x3xf32>
    %a = train.reduce_sum %t1 [0, 1] : tensor<3x2xf32> -> tensor<f32>
    %b = train.reduce_sum %t2 [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %a, %b : tensor<f32>, tensor<f32>
  }
}
