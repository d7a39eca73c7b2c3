module {
train.model @mlp {
train.param @out.w : tensor<3x2xf32> = normal(0.57735026918962573)
train.param @out.b : tensor<2xf32> = zeros
train.state @out.w.adam_m : tensor<3x2xf32> = zeros {of = @out.w}
train.state @out.w.adam_v : tensor<3x2xf32> = zeros {of = @out.w}
train.state @out.b.adam_m : tensor<2xf32> = zeros {of = @out.b}
train.state @out.b.adam_v : tensor<2xf32> = zeros {of = @out.b}
train.step {
%0 = train.input "x" : tensor<64x3xf32>
%1 = train.input "y" : tensor<64xi32>
%2 = train.read @out.w : tensor<3x2xf32>
%3 = train.matmul %0, %2 : tensor<64x3xf32>, tensor<3x2xf32> -> tensor<64x2xf32>
%4 = train.read @out.b : tensor<2xf32>
%5 = train.add %3, %4 : tensor<64x2xf32>, tensor<2xf32> -> tensor<64x2xf32>
%6 = train.cross_entropy %5, %1 : tensor<64x2xf32>, tensor<64xi32> -> tensor<f32>
%7 = train.constant dense<1.000000e+00> : tensor<f32>
%8 = train.softmax %5 : tensor<64x2xf32>
%9 = train.one_hot %1 : tensor<64xi32> -> tensor<64x2xf32>
%10 = train.constant dense<1.562500e-02> : tensor<f32>
%11 = train.mul %7, %10 : tensor<f32>
%12 = train.sub %8, %9 : tensor<64x2xf32>
%13 = train.mul %12, %11 : tensor<64x2xf32>, tensor<f32> -> tensor<64x2xf32>
%14 = train.reduce_sum %13 [0] : tensor<64x2xf32> -> tensor<2xf32>
%15 = train.transpose %0 [1, 0] : tensor<64x3xf32> -> tensor<3x64xf32>
%16 = train.matmul %15, %13 : tensor<3x64xf32>, tensor<64x2xf32> -> tensor<3x2xf32>
%17 = train.step_count : tensor<f32>
%18 = train.constant dense<1.000000e+00> : tensor<f32>
%19 = train.constant dense<5.000000e-02> : tensor<f32>
%20 = train.mul %19, %18 : tensor<f32>
%21 = train.constant dense<2.000000e-02> : tensor<f32>
%22 = train.mul %21, %18 : tensor<f32>
%23 = train.read @out.w : tensor<3x2xf32>
%24 = train.constant dense<0.899999976> : tensor<f32>
%25 = train.pow %24, %17 : tensor<f32>
%26 = train.constant dense<1.000000e+00> : tensor<f32>
%27 = train.sub %26, %25 : tensor<f32>
%28 = train.constant dense<0.949999988> : tensor<f32>
%29 = train.pow %28, %17 : tensor<f32>
%30 = train.constant dense<1.000000e+00> : tensor<f32>
%31 = train.sub %30, %29 : tensor<f32>
%32 = train.read @out.w.adam_m : tensor<3x2xf32>
%33 = train.read @out.w.adam_v : tensor<3x2xf32>
%34 = train.constant dense<1.000000e-01> : tensor<f32>
%35 = train.mul %34, %16 : tensor<f32>, tensor<3x2xf32> -> tensor<3x2xf32>
%36 = train.constant dense<0.899999976> : tensor<f32>
%37 = train.mul %36, %32 : tensor<f32>, tensor<3x2xf32> -> tensor<3x2xf32>
%38 = train.add %37, %35 : tensor<3x2xf32>
%39 = train.mul %16, %16 : tensor<3x2xf32>
%40 = train.constant dense<5.000000e-02> : tensor<f32>
%41 = train.mul %40, %39 : tensor<f32>, tensor<3x2xf32> -> tensor<3x2xf32>
%42 = train.constant dense<0.949999988> : tensor<f32>
%43 = train.mul %42, %33 : tensor<f32>, tensor<3x2xf32> -> tensor<3x2xf32>
%44 = train.add %43, %41 : tensor<3x2xf32>
train.write %38 to @out.w.adam_m : tensor<3x2xf32>
train.write %44 to @out.w.adam_v : tensor<3x2xf32>
%45 = train.constant dense<9.99999993E-9> : tensor<f32>
%46 = train.div %44, %31 : tensor<3x2xf32>, tensor<f32> -> tensor<3x2xf32>
%47 = train.sqrt %46 : tensor<3x2xf32>
%48 = train.add %47, %45 : tensor<3x2xf32>, tensor<f32> -> tensor<3x2xf32>
%49 = train.div %38, %27 : tensor<3x2xf32>, tensor<f32> -> tensor<3x2xf32>
%50 = train.div %49, %48 : tensor<3x2xf32>
%51 = train.mul %20, %50 : tensor<f32>, tensor<3x2xf32> -> tensor<3x2xf32>
%52 = train.sub %23, %51 : tensor<3x2xf32>
train.write %52 to @out.w : tensor<3x2xf32>
%53 = train.read @out.b : tensor<2xf32>
%54 = train.read @out.b.adam_m : tensor<2xf32>
%55 = train.read @out.b.adam_v : tensor<2xf32>
%56 = train.constant dense<1.000000e-01> : tensor<f32>
%57 = train.mul %56, %14 : tensor<f32>, tensor<2xf32> -> tensor<2xf32>
%58 = train.constant dense<0.899999976> : tensor<f32>
%59 = train.mul %58, %54 : tensor<f32>, tensor<2xf32> -> tensor<2xf32>
%60 = train.add %59, %57 : tensor<2xf32>
%61 = train.mul %14, %14 : tensor<2xf32>
%62 = train.constant dense<5.000000e-02> : tensor<f32>
%63 = train.mul %62, %61 : tensor<f32>, tensor<2xf32> -> tensor<2xf32>
%64 = train.constant dense<0.949999988> : tensor<f32>
%65 = train.mul %64, %55 : tensor<f32>, tensor<2xf32> -> tensor<2xf32>
%66 = train.add %65, %63 : tensor<2xf32>
train.write %60 to @out.b.adam_m : tensor<2xf32>
train.write %66 to @out.b.adam_v : tensor<2xf32>
%67 = train.constant dense<9.99999993E-9> : tensor<f32>
%68 = train.div %66, %31 : tensor<2xf32>, tensor<f32> -> tensor<2xf32>
%69 = train.sqrt %68 : tensor<2xf32>
%70 = train.add %69, %67 : tensor<2xf32>, tensor<f32> -> tensor<2xf32>
%71 = train.div %60, %27 : tensor<2xf32>, tensor<f32> -> tensor<2xf32>
%72 = train.div %71, %70 : tensor<2xf32>
%73 = train.mul %20, %72 : tensor<f32>, tensor<2xf32> -> tensor<2xf32>
%74 = train.sub %53, %73 : tensor<2xf32>
train.write %74 to @out.b : tensor<2xf32>
train.yield %6 : tensor<f32>
}
}
}

