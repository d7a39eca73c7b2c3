// RUN: stretto-opt %s -split-input-file -verify-diagnostics

// A bool (an i1 IntegerAttr) is not a number: number and integer trainer
// options reject it by type (it would otherwise read as -1).

// expected-error @+1 {{'train.model' op trainer option 'lr' must be a number, got true}}
train.model @m attributes {trainer = {lr = true}} {
}

// -----

// expected-error @+1 {{'train.model' op trainer option 'total_steps' must be an integer, got true}}
train.model @m attributes {trainer = {total_steps = true}} {
}
