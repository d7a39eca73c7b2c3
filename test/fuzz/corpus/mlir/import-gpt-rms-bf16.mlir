module {
train.model @gpt_tiny {
train.param @wte : tensor<8x8xbf16> = normal(2.000000e-02)
train.param @wpe : tensor<4x8xbf16> = normal(2.000000e-02)
train.param @h0.ln1.g : tensor<8xbf16> = ones
train.param @h0.attn.qkv.w : tensor<8x24xbf16> = normal(2.000000e-02)
train.param @h0.attn.qkv.b : tensor<24xbf16> = zeros
train.param @h0.attn.proj.w : tensor<8x8xbf16> = normal(0.014142135623730949)
train.param @h0.attn.proj.b : tensor<8xbf16> = zeros
train.param @h0.ln2.g : tensor<8xbf16> = ones
train.param @h0.mlp.fc.w : tensor<8x32xbf16> = normal(2.000000e-02)
train.param @h0.mlp.fc.b : tensor<32xbf16> = zeros
train.param @h0.mlp.proj.w : tensor<32x8xbf16> = normal(0.014142135623730949)
train.param @h0.mlp.proj.b : tensor<8xbf16> = zeros
train.param @ln_f.g : tensor<8xbf16> = ones
train.param @head.w : tensor<8x8xbf16> = normal(2.000000e-02)
train.step {
%0 = train.input "tokens" : tensor<2x4xi32>
%1 = train.input "targets" : tensor<2x4xi32>
%2 = train.read @wte : tensor<8x8xbf16>
%3 = train.read @wpe : tensor<4x8xbf16>
%4 = train.embedding %2[%0] : tensor<8x8xbf16>, tensor<2x4xi32> -> tensor<2x4x8xbf16>
%5 = train.add %4, %3 : tensor<2x4x8xbf16>, tensor<4x8xbf16> -> tensor<2x4x8xbf16>
%6 = train.read @h0.ln1.g : tensor<8xbf16>
%7 = train.rms_norm %5, %6 : tensor<2x4x8xbf16>, tensor<8xbf16>
%8 = train.read @h0.attn.qkv.w : tensor<8x24xbf16>
%9 = train.matmul %7, %8 : tensor<2x4x8xbf16>, tensor<8x24xbf16> -> tensor<2x4x24xbf16>
%10 = train.read @h0.attn.qkv.b : tensor<24xbf16>
%11 = train.add %9, %10 : tensor<2x4x24xbf16>, tensor<24xbf16> -> tensor<2x4x24xbf16>
%12 = train.reshape %11 : tensor<2x4x24xbf16> -> tensor<2x4x3x2x4xbf16>
%13 = train.transpose %12 [2, 0, 3, 1, 4] : tensor<2x4x3x2x4xbf16> -> tensor<3x2x2x4x4xbf16>
%14 = train.slice %13 axis = 0 offset = 0 : tensor<3x2x2x4x4xbf16> -> tensor<1x2x2x4x4xbf16>
%15 = train.reshape %14 : tensor<1x2x2x4x4xbf16> -> tensor<2x2x4x4xbf16>
%16 = train.slice %13 axis = 0 offset = 1 : tensor<3x2x2x4x4xbf16> -> tensor<1x2x2x4x4xbf16>
%17 = train.reshape %16 : tensor<1x2x2x4x4xbf16> -> tensor<2x2x4x4xbf16>
%18 = train.slice %13 axis = 0 offset = 2 : tensor<3x2x2x4x4xbf16> -> tensor<1x2x2x4x4xbf16>
%19 = train.reshape %18 : tensor<1x2x2x4x4xbf16> -> tensor<2x2x4x4xbf16>
%20 = train.attention %15, %17, %19 causal {scale = 5.000000e-01 : f64} : tensor<2x2x4x4xbf16>
%21 = train.transpose %20 [0, 2, 1, 3] : tensor<2x2x4x4xbf16> -> tensor<2x4x2x4xbf16>
%22 = train.reshape %21 : tensor<2x4x2x4xbf16> -> tensor<2x4x8xbf16>
%23 = train.read @h0.attn.proj.w : tensor<8x8xbf16>
%24 = train.matmul %22, %23 : tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>
%25 = train.read @h0.attn.proj.b : tensor<8xbf16>
%26 = train.add %24, %25 : tensor<2x4x8xbf16>, tensor<8xbf16> -> tensor<2x4x8xbf16>
%27 = train.add %5, %26 : tensor<2x4x8xbf16>
%28 = train.read @h0.ln2.g : tensor<8xbf16>
%29 = train.rms_norm %27, %28 : tensor<2x4x8xbf16>, tensor<8xbf16>
%30 = train.read @h0.mlp.fc.w : tensor<8x32xbf16>
%31 = train.matmul %29, %30 : tensor<2x4x8xbf16>, tensor<8x32xbf16> -> tensor<2x4x32xbf16>
%32 = train.read @h0.mlp.fc.b : tensor<32xbf16>
%33 = train.add %31, %32 : tensor<2x4x32xbf16>, tensor<32xbf16> -> tensor<2x4x32xbf16>
%34 = train.gelu %33 : tensor<2x4x32xbf16>
%35 = train.read @h0.mlp.proj.w : tensor<32x8xbf16>
%36 = train.matmul %34, %35 : tensor<2x4x32xbf16>, tensor<32x8xbf16> -> tensor<2x4x8xbf16>
%37 = train.read @h0.mlp.proj.b : tensor<8xbf16>
%38 = train.add %36, %37 : tensor<2x4x8xbf16>, tensor<8xbf16> -> tensor<2x4x8xbf16>
%39 = train.add %27, %38 : tensor<2x4x8xbf16>
%40 = train.read @ln_f.g : tensor<8xbf16>
%41 = train.rms_norm %39, %40 : tensor<2x4x8xbf16>, tensor<8xbf16>
%42 = train.read @head.w : tensor<8x8xbf16>
%43 = train.matmul %41, %42 : tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>
%44 = train.cross_entropy %43, %1 : tensor<2x4x8xbf16>, tensor<2x4xi32> -> tensor<bf16>
train.yield %44 : tensor<bf16>
}
}
}
