// Reads reference tensors (Hugging Face outputs written by the fixture
// scripts) from a safetensors file for the model tests.
#pragma once

#include <string>
#include <vector>

#include "core/checkpoint/safetensors.hpp"

namespace oslo_test {

struct SafetensorsRef {
  oslo::safetensors::Reader r;
  explicit SafetensorsRef(const std::string& path) : r(path) {}
  bool has(const std::string& name) const { return r.find(name) != nullptr; }
  // The tensor's elements as T (the file's dtype must be T's); its shape
  // into *shape when given.
  template <typename T>
  std::vector<T> get(const std::string& name, std::vector<int64_t>* shape = nullptr) const {
    const auto& t = r.at(name);
    std::vector<T> v(t.nbytes() / sizeof(T));
    r.read(t, 0, t.nbytes(), v.data());
    if (shape) shape->assign(t.shape.begin(), t.shape.end());
    return v;
  }
};

}  // namespace oslo_test
