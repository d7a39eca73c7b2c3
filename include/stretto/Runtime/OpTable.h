//===- OpTable.h - each op kind's handler in one backend -------*- C++ -*-===//
//
// Every backend that runs or checks a Graph (the reference executor, the
// compiled runtime on the host and on a GPU, the graph validator) finds an
// op kind's implementation in one table indexed by OpKind, built once from
// rows that name the kinds they serve:
//
//   static const OpTable<Handler> table = OpTable<Handler>("cpu")
//       .onClass(OpClass::Binary, &HostDevice::binary)
//       .on({OpKind::LayerNorm, OpKind::RmsNorm}, &HostDevice::norm);
//
// A kind without a row has a null handler; opTableCoverage() lists each
// backend's table so that OpTableTest, generated from Ops.def, fails when a
// backend lacks a row for any op kind (adding a row to Ops.def without a
// handler everywhere is caught there, not by a user's plan).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_OPTABLE_H
#define STRETTO_RUNTIME_OPTABLE_H

#include "stretto/Runtime/Graph.h"

#include <array>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

namespace stretto {

/// How many kinds Ops.def declares.
inline constexpr size_t kNumOpKinds = 0
#define STRETTO_OP(Kind, name, arity, cls, fn) +1
#include "stretto/Ops.def"
#undef STRETTO_OP
    ;

template <class Handler> class OpTable {
public:
  explicit OpTable(const char *backend) : backend(backend) {}

  /// Serves `kinds` with `h`.
  OpTable &on(std::initializer_list<OpKind> kinds, Handler h) {
    for (OpKind k : kinds)
      rows[static_cast<size_t>(k)] = h;
    return *this;
  }
  /// Serves every kind of class `c` with `h`.
  OpTable &onClass(OpClass c, Handler h) {
    for (OpKind k : allOpKinds())
      if (opClass(k) == c)
        rows[static_cast<size_t>(k)] = h;
    return *this;
  }

  /// The handler of `k`; null when the table has no row for it.
  Handler operator[](OpKind k) const { return rows[static_cast<size_t>(k)]; }
  bool has(OpKind k) const { return rows[static_cast<size_t>(k)] != nullptr; }
  const char *name() const { return backend; }

private:
  const char *backend;
  std::array<Handler, kNumOpKinds> rows{};
};

/// One backend's table, as OpTableTest sees it.
struct OpTableCoverage {
  std::string backend;
  std::function<bool(OpKind)> has;
};

/// Each backend's table, defined beside the backend.
std::vector<OpTableCoverage> referenceOpTables(); // f32 and f64
OpTableCoverage hostOpTable();
OpTableCoverage cudaOpTable(); // built whether or not a GPU is present
OpTableCoverage validatorOpTable();

/// The tables of every backend: the reference executor, the compiled
/// runtime's host and CUDA devices and the graph validator.
std::vector<OpTableCoverage> opTableCoverage();

/// A table's view for opTableCoverage.
template <class Handler> OpTableCoverage coverageOf(const OpTable<Handler> &t) {
  return {t.name(), [&t](OpKind k) { return t.has(k); }};
}

} // namespace stretto

#endif // STRETTO_RUNTIME_OPTABLE_H
