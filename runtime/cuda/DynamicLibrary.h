//===- DynamicLibrary.h - a library opened at run time (internal) -*- C++ -*-===//
//
// CUDA's libraries (driver, NVRTC, cuBLASLt) are opened with dlopen so that
// nothing links them: a machine without them builds and runs on the CPU.
// Never closed (a CUDA driver must not be unloaded after cuInit).
//
//===----------------------------------------------------------------------===//
#ifndef STRETTO_RUNTIME_DYNAMICLIBRARY_H
#define STRETTO_RUNTIME_DYNAMICLIBRARY_H

#include <dlfcn.h>

#include <initializer_list>
#include <string>
#include <type_traits>

namespace stretto {

class DynamicLibrary {
public:
  /// The first of `names` that loads; false when none does.
  bool open(std::initializer_list<const char *> names) {
    for (const char *name : names)
      if ((handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
        return true;
    return false;
  }
  bool isOpen() const { return handle_ != nullptr; }
  /// fn := the function `name`; the first name not found is kept (missing()).
  template <typename F> void bind(F &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<F>>(dlsym(handle_, name));
    if (!fn && missing_.empty())
      missing_ = name;
  }
  /// "" when every bind() found its function.
  const std::string &missing() const { return missing_; }

private:
  void *handle_ = nullptr;
  std::string missing_;
};

} // namespace stretto

#endif
