train.model @elementwise {
  train.param @w : tensor<3xf32> = normal(1.0)
  train.step {
    %w = train.read @w : tensor<3xf32>
    %x = train.input "x" : tensor<3xf32>
    %two = train.constant dense<2.0> : tensor<f32>
    %p = train.pow %w, %two : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
    %d = train.div %x, %w : tensor<3xf32>
    %m = train.max %p, %d : tensor<3xf32>
    %c = train.cos %m : tensor<3xf32>
    %l = train.reduce_sum %c [0] : tensor<3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
