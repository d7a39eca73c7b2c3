train.model @layout {
  train.step {
    %x = train.input "x" : tensor<2x3x4xf32>
    %w = train.input "w" : tensor<4x5xf32>
    %v = train.input "v" : tensor<4xf32>
    %mm = train.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>
    %tr = train.transpose %mm [0, 2, 1] : tensor<2x3x5xf32> -> tensor<2x5x3xf32>
    %bmm = train.matmul %mm, %tr : tensor<2x3x5xf32>, tensor<2x5x3xf32> -> tensor<2x3x3xf32>
    %rs = train.reshape %bmm : tensor<2x3x3xf32> -> tensor<18xf32>
    %bc = train.broadcast %v : tensor<4xf32> -> tensor<2x3x4xf32>
    %red = train.reduce_sum %bc [0, 2] : tensor<2x3x4xf32> -> tensor<3xf32>
    %sl = train.slice %x axis = 2 offset = 1 : tensor<2x3x4xf32> -> tensor<2x3x2xf32>
    %pd = train.pad %sl axis = 0 offset = 3 : tensor<2x3x2xf32> -> tensor<5x3x2xf32>
    %ids = train.input "ids" : tensor<2x3xi32>
    %flat = train.reshape %ids : tensor<2x3xi32> -> tensor<6xi32>
    %l = train.reduce_sum %rs [0] : tensor<18xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
