//===- TrainDialect.h - the `train` dialect ----------------------*- C++ -*-===//
#ifndef STRETTO_DIALECT_TRAIN_TRAINDIALECT_H
#define STRETTO_DIALECT_TRAIN_TRAINDIALECT_H

#include "mlir/IR/Dialect.h"

#include "Train/TrainDialect.h.inc"

#endif
