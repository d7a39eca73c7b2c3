//===- TrainDialect.cpp - the `train` dialect ----------------------------===//
#include "stretto/Dialect/Train/TrainDialect.h"
#include "stretto/Dialect/Train/TrainOps.h"

using namespace mlir;
using namespace stretto::train;

#include "Train/TrainDialect.cpp.inc"

void TrainDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Train/TrainOps.cpp.inc"
      >();
}

Operation *TrainDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                             Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, type, elements);
}
