train.model @m {
  %c = train.constant dense<1.000000e+00> : tensor<f32>
}
