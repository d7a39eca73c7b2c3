// RUN: stretto-opt %s | stretto-opt | FileCheck %s

// Every op of the dialect is parsed, printed and parsed again; the CHECK lines
// pin the printed form. Each model below is one group of ops.

// The smallest complete model: a param, a step, matmul and cross-entropy.
// CHECK-LABEL: train.model @tiny {
train.model @tiny {
  // CHECK: train.param @w : tensor<4x3xf32> = normal(1.000000e-01) {role = "matrix"}
  train.param @w : tensor<4x3xf32> = normal(0.1) {role = "matrix"}
  // CHECK: train.step {
  train.step {
    // CHECK: %[[X:.*]] = train.input "x" : tensor<2x4xf32>
    %x = train.input "x" : tensor<2x4xf32>
    // CHECK: %[[T:.*]] = train.input "t" : tensor<2xi32>
    %t = train.input "t" : tensor<2xi32>
    // CHECK: %[[W:.*]] = train.read @w : tensor<4x3xf32>
    %w = train.read @w : tensor<4x3xf32>
    // CHECK: %[[Y:.*]] = train.matmul %[[X]], %[[W]] : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    %y = train.matmul %x, %w : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
    // CHECK: %[[L:.*]] = train.cross_entropy %[[Y]], %[[T]] : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
    %l = train.cross_entropy %y, %t : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
    // CHECK: train.yield %[[L]] : tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// The trainer dictionary keeps every key and value (printed sorted by key);
// initializers print their scale unless it is the default 0.
// CHECK-LABEL: train.model @recipe attributes {trainer = {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, grad_clip = 1.000000e+00 : f64, lr = 3.000000e-03 : f64, micro_batches = 2 : i64, min_lr_ratio = 1.000000e-01 : f64, momentum = 9.000000e-01 : f64, muon_lr = 2.000000e-02 : f64, muon_momentum = 0.94999999999999996 : f64, muon_scale = "rms", optimizer = "muon", replicas = 4 : i64, schedule = "cosine", stages = 1 : i64, sync = "gossip", total_steps = 600 : i64, warmup_steps = 0 : i64, weight_decay = 1.000000e-01 : f64}} {
train.model @recipe attributes {trainer = {
    optimizer = "muon", lr = 3.0e-3, muon_lr = 0.02, weight_decay = 0.1,
    beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, momentum = 0.9, muon_momentum = 0.95,
    muon_scale = "rms", grad_clip = 1.0, schedule = "cosine", warmup_steps = 0,
    total_steps = 600, min_lr_ratio = 0.1, micro_batches = 2, stages = 1,
    replicas = 4, sync = "gossip"}} {
  // CHECK-NEXT: train.param @wte : tensor<8x4xf32> = normal(2.000000e-02) {layer = 0 : i64, role = "embedding"}
  train.param @wte : tensor<8x4xf32> = normal(0.02) {role = "embedding", layer = 0 : i64}
  // CHECK-NEXT: train.param @w : tensor<4x4xbf16> = uniform(5.000000e-01) {role = "matrix"}
  train.param @w : tensor<4x4xbf16> = uniform(0.5) {role = "matrix"}
  // CHECK-NEXT: train.param @g : tensor<4xf64> = ones {role = "norm"}
  train.param @g : tensor<4xf64> = ones(0.0) {role = "norm"}
  // CHECK-NEXT: train.param @b : tensor<4xf32> = zeros {role = "bias"}
  train.param @b : tensor<4xf32> = zeros {role = "bias"}
  // CHECK-NEXT: train.param @h : tensor<4x8xf32> = zeros(2.500000e-01) {role = "head"}
  train.param @h : tensor<4x8xf32> = zeros(0.25) {role = "head"}
  // A matrix held as nn.Linear holds it, tied under another name (exporter).
  // CHECK-NEXT: train.param @lm : tensor<8x4xf32> = zeros {aliases = ["lm_head.weight"], layout = "out_in", role = "head"}
  train.param @lm : tensor<8x4xf32> = zeros {role = "head", layout = "out_in", aliases = ["lm_head.weight"]}
  // CHECK-NEXT: train.state @w.muon_m : tensor<4x4xbf16> = zeros {of = @w}
  train.state @w.muon_m : tensor<4x4xbf16> = zeros(0.0) {of = @w}
  // CHECK-NEXT: train.state @wte.v1 : tensor<8x4xf32> = normal(1.000000e+00) {of = @wte}
  train.state @wte.v1 : tensor<8x4xf32> = normal(1.0) {of = @wte}
}

// State ops: read, write, grad and step_count; yield with extra metrics.
// CHECK-LABEL: train.model @state {
train.model @state {
  train.param @w : tensor<4x4xf32> = normal(0.1)
  train.state @w.m : tensor<4x4xf32> = zeros {of = @w}
  train.step {
    // CHECK: %[[W:.*]] = train.read @w : tensor<4x4xf32>
    %w = train.read @w : tensor<4x4xf32>
    // CHECK: %[[M:.*]] = train.read @w.m : tensor<4x4xf32>
    %m = train.read @w.m : tensor<4x4xf32>
    // CHECK: %[[T:.*]] = train.step_count : tensor<f32>
    %t = train.step_count : tensor<f32>
    // CHECK: train.grad %[[W]] for @w : tensor<4x4xf32>
    train.grad %w for @w : tensor<4x4xf32>
    // CHECK: train.write %[[M]] to @w : tensor<4x4xf32>
    train.write %m to @w : tensor<4x4xf32>
    // CHECK: train.write %[[W]] to @w.m : tensor<4x4xf32>
    train.write %w to @w.m : tensor<4x4xf32>
    // CHECK: %[[L:.*]] = train.reduce_sum %[[W]] [0, 1] : tensor<4x4xf32> -> tensor<f32>
    %l = train.reduce_sum %w [0, 1] : tensor<4x4xf32> -> tensor<f32>
    // CHECK: train.yield %[[L]], %[[T]] : tensor<f32>, tensor<f32>
    train.yield %l, %t : tensor<f32>, tensor<f32>
  }
}

// Constants: splat and non-splat, float and i32, with and without extra attributes.
// CHECK-LABEL: train.model @constants {
train.model @constants {
  train.step {
    // CHECK: train.constant dense<2.000000e+00> : tensor<f32>
    %a = train.constant dense<2.0> : tensor<f32>
    // CHECK: train.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<3xf32>
    %b = train.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
    // CHECK: train.constant dense<[0, 7]> : tensor<2xi32>
    %c = train.constant dense<[0, 7]> : tensor<2xi32>
    // CHECK: train.constant {tag = "x"} dense<5.000000e-01> : tensor<2x2xbf16>
    %d = train.constant {tag = "x"} dense<0.5> : tensor<2x2xbf16>
    %l = train.add %a, %a : tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// Binary ops print one type when operands and result share it, and
// `: A, B -> C` when one side broadcasts.
// CHECK-LABEL: train.model @elementwise {
train.model @elementwise {
  train.step {
    // CHECK: %[[X:.*]] = train.input "x" : tensor<2x3xf32>
    %x = train.input "x" : tensor<2x3xf32>
    // CHECK: %[[B:.*]] = train.input "b" : tensor<3xf32>
    %b = train.input "b" : tensor<3xf32>
    // CHECK: %[[C:.*]] = train.input "c" : tensor<2x1xf32>
    %c = train.input "c" : tensor<2x1xf32>
    // CHECK: %[[S:.*]] = train.constant dense<2.000000e+00> : tensor<f32>
    %s = train.constant dense<2.0> : tensor<f32>
    // CHECK: %[[ADD:.*]] = train.add %[[X]], %[[X]] : tensor<2x3xf32>{{$}}
    %add = train.add %x, %x : tensor<2x3xf32>
    // CHECK: %[[ADDB:.*]] = train.add %[[ADD]], %[[B]] : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %addb = train.add %add, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
    // Both operands broadcast: [2, 1] and [3] give [2, 3].
    // CHECK: %[[SUB:.*]] = train.sub %[[C]], %[[B]] : tensor<2x1xf32>, tensor<3xf32> -> tensor<2x3xf32>
    %sub = train.sub %c, %b : tensor<2x1xf32>, tensor<3xf32> -> tensor<2x3xf32>
    // CHECK: %[[MUL:.*]] = train.mul %[[S]], %[[SUB]] : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
    %mul = train.mul %s, %sub : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
    // CHECK: %[[DIV:.*]] = train.div %[[MUL]], %[[ADDB]] : tensor<2x3xf32>{{$}}
    %div = train.div %mul, %addb : tensor<2x3xf32>
    // CHECK: %[[MAX:.*]] = train.max %[[DIV]], %[[S]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %max = train.max %div, %s : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    // CHECK: %[[MIN:.*]] = train.min %[[MAX]], %[[DIV]] : tensor<2x3xf32>{{$}}
    %min = train.min %max, %div : tensor<2x3xf32>
    // CHECK: %[[POW:.*]] = train.pow %[[MIN]], %[[S]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    %pow = train.pow %min, %s : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
    // CHECK: %[[GT:.*]] = train.gt %[[POW]], %[[X]] : tensor<2x3xf32>{{$}}
    %gt = train.gt %pow, %x : tensor<2x3xf32>
    // CHECK: %[[NEG:.*]] = train.neg %[[GT]] : tensor<2x3xf32>
    %neg = train.neg %gt : tensor<2x3xf32>
    // CHECK: %[[EXP:.*]] = train.exp %[[NEG]] : tensor<2x3xf32>
    %exp = train.exp %neg : tensor<2x3xf32>
    // CHECK: %[[LOG:.*]] = train.log %[[EXP]] : tensor<2x3xf32>
    %log = train.log %exp : tensor<2x3xf32>
    // CHECK: %[[SQRT:.*]] = train.sqrt %[[LOG]] : tensor<2x3xf32>
    %sqrt = train.sqrt %log : tensor<2x3xf32>
    // CHECK: %[[RSQRT:.*]] = train.rsqrt %[[SQRT]] : tensor<2x3xf32>
    %rsqrt = train.rsqrt %sqrt : tensor<2x3xf32>
    // CHECK: %[[TANH:.*]] = train.tanh %[[RSQRT]] : tensor<2x3xf32>
    %tanh = train.tanh %rsqrt : tensor<2x3xf32>
    // CHECK: %[[COS:.*]] = train.cos %[[TANH]] : tensor<2x3xf32>
    %cos = train.cos %tanh : tensor<2x3xf32>
    // CHECK: %[[GELU:.*]] = train.gelu %[[COS]] : tensor<2x3xf32>
    %gelu = train.gelu %cos : tensor<2x3xf32>
    // CHECK: %[[DGELU:.*]] = train.gelu_grad %[[GELU]] : tensor<2x3xf32>
    %dgelu = train.gelu_grad %gelu : tensor<2x3xf32>
    // CHECK: %[[RELU:.*]] = train.relu %[[DGELU]] : tensor<2x3xf32>
    %relu = train.relu %dgelu : tensor<2x3xf32>
    // CHECK: %[[ERF:.*]] = train.erf %[[RELU]] : tensor<2x3xf32>
    %erf = train.erf %relu : tensor<2x3xf32>
    // CHECK: %[[L:.*]] = train.reduce_sum %[[ERF]] [0, 1] : tensor<2x3xf32> -> tensor<f32>
    %l = train.reduce_sum %erf [0, 1] : tensor<2x3xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// Layout ops: batched matmul (shared and batched rhs), transpose, reshape,
// broadcast, reduce_sum, slice and pad.
// CHECK-LABEL: train.model @layout {
train.model @layout {
  train.step {
    // CHECK: %[[X:.*]] = train.input "x" : tensor<2x3x4xf32>
    %x = train.input "x" : tensor<2x3x4xf32>
    // CHECK: %[[W:.*]] = train.input "w" : tensor<4x5xf32>
    %w = train.input "w" : tensor<4x5xf32>
    // CHECK: %[[V:.*]] = train.input "v" : tensor<4xf32>
    %v = train.input "v" : tensor<4xf32>
    // CHECK: %[[MM:.*]] = train.matmul %[[X]], %[[W]] : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>
    %mm = train.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>
    // CHECK: %[[TR:.*]] = train.transpose %[[MM]] [0, 2, 1] : tensor<2x3x5xf32> -> tensor<2x5x3xf32>
    %tr = train.transpose %mm [0, 2, 1] : tensor<2x3x5xf32> -> tensor<2x5x3xf32>
    // CHECK: %[[BMM:.*]] = train.matmul %[[MM]], %[[TR]] : tensor<2x3x5xf32>, tensor<2x5x3xf32> -> tensor<2x3x3xf32>
    %bmm = train.matmul %mm, %tr : tensor<2x3x5xf32>, tensor<2x5x3xf32> -> tensor<2x3x3xf32>
    // CHECK: %[[RS:.*]] = train.reshape %[[BMM]] : tensor<2x3x3xf32> -> tensor<18xf32>
    %rs = train.reshape %bmm : tensor<2x3x3xf32> -> tensor<18xf32>
    // CHECK: %[[BC:.*]] = train.broadcast %[[V]] : tensor<4xf32> -> tensor<2x3x4xf32>
    %bc = train.broadcast %v : tensor<4xf32> -> tensor<2x3x4xf32>
    // CHECK: %[[RED:.*]] = train.reduce_sum %[[BC]] [0, 2] : tensor<2x3x4xf32> -> tensor<3xf32>
    %red = train.reduce_sum %bc [0, 2] : tensor<2x3x4xf32> -> tensor<3xf32>
    // CHECK: %[[SL:.*]] = train.slice %[[X]] axis = 2 offset = 1 : tensor<2x3x4xf32> -> tensor<2x3x2xf32>
    %sl = train.slice %x axis = 2 offset = 1 : tensor<2x3x4xf32> -> tensor<2x3x2xf32>
    // CHECK: %[[PD:.*]] = train.pad %[[SL]] axis = 0 offset = 3 : tensor<2x3x2xf32> -> tensor<5x3x2xf32>
    %pd = train.pad %sl axis = 0 offset = 3 : tensor<2x3x2xf32> -> tensor<5x3x2xf32>
    // An i32 reshape (ids may be reshaped too).
    // CHECK: train.reshape %{{.*}} : tensor<2x3xi32> -> tensor<6xi32>
    %ids = train.input "ids" : tensor<2x3xi32>
    %flat = train.reshape %ids : tensor<2x3xi32> -> tensor<6xi32>
    %l = train.reduce_sum %rs [0] : tensor<18xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// Model ops: softmax (plain and causal), layer_norm (default and explicit
// eps), norm_grad (centered or not), rms_norm, attention (plain and
// causal), attention_grad, embedding,
// scatter_rows, one_hot.
// CHECK-LABEL: train.model @modelops {
train.model @modelops {
  train.step {
    // CHECK: %[[TOK:.*]] = train.input "tokens" : tensor<2x3xi32>
    %tok = train.input "tokens" : tensor<2x3xi32>
    // CHECK: %[[TAB:.*]] = train.input "table" : tensor<8x4xf32>
    %tab = train.input "table" : tensor<8x4xf32>
    // CHECK: %[[G:.*]] = train.input "g" : tensor<4xf32>
    %g = train.input "g" : tensor<4xf32>
    // CHECK: %[[Q:.*]] = train.input "q" : tensor<2x2x3x4xf32>
    %q = train.input "q" : tensor<2x2x3x4xf32>
    // CHECK: %[[S:.*]] = train.input "s" : tensor<2x3x3xf32>
    %s = train.input "s" : tensor<2x3x3xf32>
    // CHECK: %[[E:.*]] = train.embedding %[[TAB]][%[[TOK]]] : tensor<8x4xf32>, tensor<2x3xi32> -> tensor<2x3x4xf32>
    %e = train.embedding %tab[%tok] : tensor<8x4xf32>, tensor<2x3xi32> -> tensor<2x3x4xf32>
    // CHECK: train.softmax %[[S]] : tensor<2x3x3xf32>
    %sm = train.softmax %s : tensor<2x3x3xf32>
    // CHECK: train.softmax %[[S]] causal : tensor<2x3x3xf32>
    %smc = train.softmax %s causal : tensor<2x3x3xf32>
    // The default eps (1e-5) is not printed; another one is.
    // CHECK: %[[LN:.*]] = train.layer_norm %[[E]], %[[G]], %[[G]] : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
    %ln = train.layer_norm %e, %g, %g : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
    // CHECK: train.layer_norm %[[E]], %[[G]], %[[G]] {eps = 1.000000e-03 : f64} : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
    %ln2 = train.layer_norm %e, %g, %g {eps = 1.0e-3 : f64} : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
    // CHECK: train.norm_grad %[[E]], %[[G]], %[[E]] centered {eps = 1.000000e-03 : f64} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
    %lng = train.norm_grad %e, %g, %e centered {eps = 1.0e-3 : f64} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
    // CHECK: train.norm_grad %[[E]], %[[G]], %[[E]] {eps = 1.000000e-05 : f64} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<7x4xf32>
    %rng = train.norm_grad %e, %g, %e {eps = 1.0e-5 : f64} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<7x4xf32>
    // With an addend (kernel-norm-grad-epilogue), and rows rounded to bf16.
    // CHECK: train.norm_grad %[[E]], %[[G]], %[[E]] plus %[[LN]] : tensor<2x3x4xf32> centered {eps = 1.000000e-05 : f64, kernel.store_bf16} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
    %lnga = train.norm_grad %e, %g, %e plus %ln : tensor<2x3x4xf32> centered {eps = 1.0e-5 : f64, kernel.store_bf16} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
    // CHECK: %[[RN:.*]] = train.rms_norm %[[LN]], %[[G]] : tensor<2x3x4xf32>, tensor<4xf32>
    %rn = train.rms_norm %ln, %g : tensor<2x3x4xf32>, tensor<4xf32>
    // CHECK: train.rms_norm %[[LN]], %[[G]] {eps = 2.500000e-01 : f64} : tensor<2x3x4xf32>, tensor<4xf32>
    %rn2 = train.rms_norm %ln, %g {eps = 0.25 : f64} : tensor<2x3x4xf32>, tensor<4xf32>
    // CHECK: train.attention %[[Q]], %[[Q]], %[[Q]] causal {scale = 5.000000e-01 : f64} : tensor<2x2x3x4xf32>
    %att = train.attention %q, %q, %q causal {scale = 0.5 : f64} : tensor<2x2x3x4xf32>
    // CHECK: train.attention %[[Q]], %[[Q]], %[[Q]] {scale = 2.500000e-01 : f64} : tensor<2x2x3x4xf32>
    %att2 = train.attention %q, %q, %q {scale = 0.25 : f64} : tensor<2x2x3x4xf32>
    // CHECK: train.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[Q]] causal {scale = 5.000000e-01 : f64} : tensor<2x2x3x4xf32> -> tensor<3x2x2x3x4xf32>
    %attg = train.attention_grad %q, %q, %q, %q causal {scale = 0.5 : f64} : tensor<2x2x3x4xf32> -> tensor<3x2x2x3x4xf32>
    // CHECK: train.scatter_rows %[[RN]] into rows[%[[TOK]]] : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<8x4xf32>
    %sc = train.scatter_rows %rn into rows[%tok] : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<8x4xf32>
    // CHECK: train.one_hot %[[TOK]] : tensor<2x3xi32> -> tensor<2x3x8xf32>
    %oh = train.one_hot %tok : tensor<2x3xi32> -> tensor<2x3x8xf32>
    // CHECK: train.cross_entropy %[[RN]], %[[TOK]] : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<f32>
    %l = train.cross_entropy %rn, %tok : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}

// newton_schulz: the default coefficients and steps are not printed; others are.
// CHECK-LABEL: train.model @optimizer_ops {
train.model @optimizer_ops {
  train.step {
    // CHECK: %[[G:.*]] = train.input "g" : tensor<4x8xf32>
    %g = train.input "g" : tensor<4x8xf32>
    // CHECK: train.newton_schulz %[[G]] : tensor<4x8xf32>
    %o = train.newton_schulz %g : tensor<4x8xf32>
    // CHECK: train.newton_schulz %[[G]] {a = 2.000000e+00 : f64, b = -1.500000e+00 : f64, c = 5.000000e-01 : f64, steps = 3 : i64} : tensor<4x8xf32>
    %o3 = train.newton_schulz %g {steps = 3 : i64, a = 2.0 : f64, b = -1.5 : f64, c = 0.5 : f64} : tensor<4x8xf32>
    // Explicitly giving the defaults prints nothing extra.
    // CHECK: train.newton_schulz %[[G]] : tensor<4x8xf32>
    %o5 = train.newton_schulz %g {steps = 5 : i64, a = 3.4445 : f64, b = -4.7750 : f64, c = 2.0315 : f64} : tensor<4x8xf32>
    // CHECK: train.newton_schulz_batch %[[G]], %[[G]] {bf16, steps = 3 : i64} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
    %ob = train.newton_schulz_batch %g, %g {steps = 3 : i64, bf16} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
    %l = train.reduce_sum %o [0, 1] : tensor<4x8xf32> -> tensor<f32>
    train.yield %l : tensor<f32>
  }
}
