module {
train.model @gpt_tiny {
train.param @wte : tensor<8x8xf32> = normal(2.000000e-02)
train.param @wpe : tensor<4x8xf32> = normal(2.000000e-02)
train.param @h0.ln1.g : tensor<8xf32> = ones
train.param @h0.ln1.b : tensor<8xf32> = zeros
train.param @h0.attn.qkv.w : tensor<8x24xf32> = normal(2.000000e-02)
train.param @h0.attn.qkv.b : tensor<24xf32> = zeros
train.param @h0.attn.proj.w : tensor<8x8xf32> = normal(0.014142135623730949)
train.param @h0.attn.proj.b : tensor<8xf32> = zeros
train.param @h0.ln2.g : tensor<8xf32> = ones
train.param @h0.ln2.b : tensor<8xf32> = zeros
train.param @h0.mlp.fc.w : tensor<8x32xf32> = normal(2.000000e-02)
train.param @h0.mlp.fc.b : tensor<32xf32> = zeros
train.param @h0.mlp.proj.w : tensor<32x8xf32> = normal(0.014142135623730949)
train.param @h0.mlp.proj.b : tensor<8xf32> = zeros
train.param @ln_f.g : tensor<8xf32> = ones
train.param @ln_f.b : tensor<8xf32> = zeros
train.param @head.w : tensor<8x8xf32> = normal(2.000000e-02)
train.step {
%0 = train.input "tokens" : tensor<2x4xi32>
%1 = train.input "targets" : tensor<2x4xi32>
%2 = train.read @wte : tensor<8x8xf32>
%3 = train.read @wpe : tensor<4x8xf32>
%4 = train.embedding %2[%0] : tensor<8x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
%5 = train.add %4, %3 : tensor<2x4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
%6 = train.read @h0.ln1.g : tensor<8xf32>
%7 = train.read @h0.ln1.b : tensor<8xf32>
%8 = train.layer_norm %5, %6, %7 : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
%9 = train.read @h0.attn.qkv.w : tensor<8x24xf32>
%10 = train.matmul %8, %9 : tensor<2x4x8xf32>, tensor<8x24xf32> -> tensor<2x4x24xf32>
%11 = train.read @h0.attn.qkv.b : tensor<24xf32>
%12 = train.add %10, %11 : tensor<2x4x24xf32>, tensor<24xf32> -> tensor<2x4x24xf32>
%13 = train.reshape %12 : tensor<2x4x24xf32> -> tensor<2x4x3x2x4xf32>
%14 = train.transpose %13 [2, 0, 3, 1, 4] : tensor<2x4x3x2x4xf32> -> tensor<3x2x2x4x4xf32>
%15 = train.slice %14 axis = 0 offset = 0 : tensor<3x2x2x4x4xf32> -> tensor<1x2x2x4x4xf32>
%16 = train.reshape %15 : tensor<1x2x2x4x4xf32> -> tensor<2x2x4x4xf32>
%17 = train.slice %14 axis = 0 offset = 1 : tensor<3x2x2x4x4xf32> -> tensor<1x2x2x4x4xf32>
%18 = train.reshape %17 : tensor<1x2x2x4x4xf32> -> tensor<2x2x4x4xf32>
%19 = train.slice %14 axis = 0 offset = 2 : tensor<3x2x2x4x4xf32> -> tensor<1x2x2x4x4xf32>
%20 = train.reshape %19 : tensor<1x2x2x4x4xf32> -> tensor<2x2x4x4xf32>
%21 = train.attention %16, %18, %20 causal {scale = 5.000000e-01 : f64} : tensor<2x2x4x4xf32>
%22 = train.transpose %21 [0, 2, 1, 3] : tensor<2x2x4x4xf32> -> tensor<2x4x2x4xf32>
%23 = train.reshape %22 : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
%24 = train.read @h0.attn.proj.w : tensor<8x8xf32>
%25 = train.matmul %23, %24 : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
%26 = train.read @h0.attn.proj.b : tensor<8xf32>
%27 = train.add %25, %26 : tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
%28 = train.add %5, %27 : tensor<2x4x8xf32>
%29 = train.read @h0.ln2.g : tensor<8xf32>
%30 = train.read @h0.ln2.b : tensor<8xf32>
%31 = train.layer_norm %28, %29, %30 : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
%32 = train.read @h0.mlp.fc.w : tensor<8x32xf32>
%33 = train.matmul %31, %32 : tensor<2x4x8xf32>, tensor<8x32xf32> -> tensor<2x4x32xf32>
%34 = train.read @h0.mlp.fc.b : tensor<32xf32>
%35 = train.add %33, %34 : tensor<2x4x32xf32>, tensor<32xf32> -> tensor<2x4x32xf32>
%36 = train.gelu %35 : tensor<2x4x32xf32>
%37 = train.read @h0.mlp.proj.w : tensor<32x8xf32>
%38 = train.matmul %36, %37 : tensor<2x4x32xf32>, tensor<32x8xf32> -> tensor<2x4x8xf32>
%39 = train.read @h0.mlp.proj.b : tensor<8xf32>
%40 = train.add %38, %39 : tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
%41 = train.add %28, %40 : tensor<2x4x8xf32>
%42 = train.read @ln_f.g : tensor<8xf32>
%43 = train.read @ln_f.b : tensor<8xf32>
%44 = train.layer_norm %41, %42, %43 : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
%45 = train.read @head.w : tensor<8x8xf32>
%46 = train.matmul %44, %45 : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
%47 = train.cross_entropy %46, %1 : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<f32>
train.yield %47 : tensor<f32>
}
}
}
