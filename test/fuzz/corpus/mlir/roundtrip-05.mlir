train.model @elementwise {
  train.step {
    %x = train.input "x" : tensor<2x3xf32>
    %b = train.input "b" : tensor<3xf32>
    %c = train.input "c" : tensor<2x1xf32>
    %s = train.constant dense<2.0> : tensor<f32>
    %add = train.add %x, %x : tensor<2x3xf32>
    %addb = train.add %add, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %sub = train.sub %c, %b : tensor<2x1xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %mul = train.mul %s, %sub : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %div = train.div %mul, %addb : tensor<2x3xf32>
    %max = train.max %div, %s : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %min = train.min %max, %div : tensor<2x3xf32>
    %pow = train.pow %min, %s : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %gt = train.gt %pow, %x : tensor<2x3xf32>
    %neg = train.neg %gt : tensor<2x3xf32>
    %exp = train.exp %neg : tensor<2x3xf32>
    %log = train.log %exp : tensor<2x3xf32>
    %sqrt = train.sqrt %log : tensor<2x3xf32>
    %rsqrt = train.rsqrt %sqrt : tensor<2x3xf32>
    %tanh = train.tanh %rsqrt : tensor<2x3xf32>
    %cos = train.cos %tanh : tensor<2x3xf32>
    %gelu = train.gelu %cos : tensor<2x3xf32>
    %relu = train.relu %gelu : tensor<2x3xf32>
    %l = train.reduce_sum %relu [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
