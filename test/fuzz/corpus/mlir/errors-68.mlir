train.model @m {
  train.step {
    %x = train.input "x" : tensor<f32>
    %g = train.input "g" : tensor<1xf32>
    %c = train.layer_norm %x, %g, %g : tensor<f32>, tensor<1xf32>, tensor<1xf32>
  }
}
