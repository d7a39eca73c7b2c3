train.model @tiny {
  train.param @w : tensor<4x3xf32> = normal(0.1) {role = "matrix"}
  train.step {
    %x = train.input "x" : tensor<2x4xf32>
    %t = train.input "t" : tensor<2xi32>
    %w = train.read @w : tensor<4x3xf32>
    %y = train.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %l = train.cross_entropy %y, %t : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
