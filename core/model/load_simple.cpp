// Interim loader for Hugging Face folders (single file or sharded with an
// index); reads only each slice's byte runs with pread.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/model/model.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

using namespace fsutil;
namespace {

View narrow(View v, int dim, int64_t start, int64_t len) {
  v.data = static_cast<char*>(v.data) +
           start * v.strides[dim] * static_cast<int64_t>(dtype_size(v.dtype));
  v.shape[dim] = len;
  return v;
}

}  // namespace

void load_placed_simple(const std::string& path, std::vector<PlacedTensor>& tensors,
                        Backend& backend) {
  // name -> file
  std::map<std::string, std::string> where;
  std::map<std::string, std::unique_ptr<safetensors::Reader>> readers;
  auto reader = [&](const std::string& file) -> safetensors::Reader& {
    auto& r = readers[file];
    if (!r) r = std::make_unique<safetensors::Reader>(file);
    return *r;
  };
  const std::string index = join(path, "model.safetensors.index.json");
  if (exists(index)) {
    auto j = nlohmann::json::parse(read_small_file(index, 64 << 20), nullptr, false);
    OSLO_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
               OSLO_ERR_FORMAT, index, ": no weight_map object");
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      OSLO_CHECK(it.value().is_string(), OSLO_ERR_FORMAT, index, ": weight_map[\"", it.key(),
                 "\"] is not a string");
      const std::string f = it.value().get<std::string>();
      OSLO_CHECK(f.find('/') == std::string::npos && f != ".." && !f.empty(), OSLO_ERR_FORMAT,
                 index, ": file \"", f, "\" is not inside the folder");
      where[it.key()] = join(path, f);
    }
  } else {
    const std::string file = exists(join(path, "model.safetensors"))
                                 ? join(path, "model.safetensors")
                                 : path;
    for (const auto& t : reader(file).tensors()) where[t.name] = file;
  }
  auto resolve = [&](const std::string& name) -> std::string {
    if (where.count(name)) return name;
    const std::string prefixes[] = {"transformer.", "bert.", "model."};
    for (const auto& p : prefixes) {
      if (name.rfind(p, 0) == 0 && where.count(name.substr(p.size()))) return name.substr(p.size());
      if (where.count(p + name)) return p + name;
    }
    throw Error(OSLO_ERR_FORMAT, str(path, ": tensor \"", name, "\" is missing"));
  };
  for (PlacedTensor& pt : tensors) {
    const Placement& p = pt.placement;
    const std::string key = resolve(p.name);
    safetensors::Reader& rd = reader(where[key]);
    const safetensors::TensorInfo& info = rd.at(key);
    oslo_dtype fdt;
    OSLO_CHECK(safetensors::to_oslo(info.dtype, &fdt) && dtype_is_float(fdt), OSLO_ERR_DTYPE,
               rd.path(), ": tensor \"", key, "\" has dtype ", safetensors::dtype_name(info.dtype),
               ", expected a float dtype");
    std::vector<int64_t> gshape(info.shape.begin(), info.shape.end());
    OSLO_CHECK(gshape == p.global_shape, OSLO_ERR_SHAPE, rd.path(), ": tensor \"", key,
               "\" has shape ", Tensor::shape_str(gshape), ", the config says ",
               Tensor::shape_str(p.global_shape));
    pt.tensor.zero();
    View local = view(pt.tensor);
    if (p.transpose) local = transposed(local);  // HF layout
    const size_t es = dtype_size(fdt);
    std::vector<Segment> segs = p.segments;
    if (p.split_dim < 0) segs = {Segment{0, gshape.empty() ? 1 : gshape[0], 0, true}};
    const int d = p.split_dim < 0 ? 0 : p.split_dim;
    for (const Segment& s : segs) {
      std::vector<int64_t> box = gshape;
      if (!box.empty()) box[static_cast<size_t>(d)] = s.length;
      const int64_t n = Tensor::numel_of(box);
      std::vector<char> stage(static_cast<size_t>(n) * es);
      if (d == 0 || gshape.size() < 2) {
        const int64_t row = gshape.size() < 2 ? 1 : n / s.length;
        rd.read(info, static_cast<uint64_t>(s.global_start * row) * es, stage.size(),
                stage.data());
      } else {
        const int64_t rows = gshape[0], cols = gshape[1];
        for (int64_t r = 0; r < rows; ++r)
          rd.read(info, static_cast<uint64_t>(r * cols + s.global_start) * es,
                  static_cast<uint64_t>(s.length) * es,
                  stage.data() + static_cast<size_t>(r * s.length) * es);
      }
      Tensor dev = Tensor::empty_like_shape(pt.tensor.storage()->backend, fdt, box);
      backend.copy(dev.data(), stage.data(), stage.size(), CopyKind::HostToDevice);
      View dst = gshape.empty() ? local : narrow(local, d, s.local_start, s.length);
      backend.convert(dst, view(dev));
      backend.synchronize();
    }
  }
}

}  // namespace oslo
