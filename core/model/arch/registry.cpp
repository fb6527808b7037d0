#include <string>

#include "core/common/error.hpp"
#include "core/model/arch/arch.hpp"

namespace oslo {
namespace arch {

// The registered families. Each family's file defines its entries; a new
// family adds its file to CMakeLists.txt and its entries here.
extern const Arch kGpt2, kBert, kLlama, kMistral, kQwen2;
extern const Arch kGptNeox;
extern const Arch kPhi3, kGemma;

const std::vector<const Arch*>& all() {
  static const std::vector<const Arch*> entries = {
      &kGpt2, &kBert, &kLlama, &kMistral, &kQwen2, &kGptNeox, &kPhi3, &kGemma,
  };
  return entries;
}

const Arch& find(const std::string& model_type, const std::string& src) {
  std::string names;
  for (const Arch* a : all()) {
    if (model_type == a->model_type) return *a;
    names += std::string(names.empty() ? "" : ", ") + a->model_type;
  }
  throw Error(OSLO_ERR_NOT_SUPPORTED, str(src, src.empty() ? "" : ": ", "model_type \"", model_type,
                                          "\" is not supported (", names, ")"));
}

using json = nlohmann::json;

bool ConfigReader::has(const char* key) const {
  return j.contains(key) && !j.at(key).is_null();
}

int64_t ConfigReader::integer(const char* key, int64_t def, bool required) const {
  if (!has(key)) {
    OSLO_CHECK(!required, OSLO_ERR_FORMAT, src, ": missing \"", key, "\"");
    return def;
  }
  const json& v = j.at(key);
  OSLO_CHECK(v.is_number_integer(), OSLO_ERR_FORMAT, src, ": \"", key,
             "\" must be an integer, got ", v.dump().substr(0, 64));
  return v.get<int64_t>();
}

int64_t ConfigReader::positive(const char* key, int64_t def, bool required) const {
  const int64_t v = integer(key, def, required);
  OSLO_CHECK(v > 0 && v < (int64_t{1} << 40), OSLO_ERR_FORMAT, src, ": \"", key,
             "\" must be a positive integer, got ", v);
  return v;
}

double ConfigReader::number(const char* key, double def) const {
  if (!has(key)) return def;
  const json& v = j.at(key);
  OSLO_CHECK(v.is_number(), OSLO_ERR_FORMAT, src, ": \"", key, "\" must be a number");
  return v.get<double>();
}

bool ConfigReader::boolean(const char* key, bool def) const {
  if (!has(key)) return def;
  const json& v = j.at(key);
  OSLO_CHECK(v.is_boolean(), OSLO_ERR_FORMAT, src, ": \"", key, "\" must be true or false");
  return v.get<bool>();
}

std::string ConfigReader::string(const char* key, const std::string& def) const {
  if (!has(key)) return def;
  const json& v = j.at(key);
  OSLO_CHECK(v.is_string(), OSLO_ERR_FORMAT, src, ": \"", key, "\" must be a string");
  return v.get<std::string>();
}

Activation activation(const std::string& name, const std::string& src) {
  if (name == "gelu") return Activation::GELU;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
    return Activation::GELU_TANH;
  if (name == "silu" || name == "swish") return Activation::SILU;
  if (name == "relu") return Activation::RELU;
  throw Error(OSLO_ERR_NOT_SUPPORTED, str(src, ": activation \"", name,
                                          "\" is not supported (gelu, gelu_new, silu, relu)"));
}

void read_rope(const json& obj, const std::string& src, RopeConfig* r, double* partial) {
  OSLO_CHECK(obj.is_object(), OSLO_ERR_FORMAT, src, ": rope parameters must be an object");
  ConfigReader rd{obj, src};
  r->theta = rd.number("rope_theta", r->theta);
  if (rd.has("partial_rotary_factor")) {
    const double f = rd.number("partial_rotary_factor", 1.0);
    OSLO_CHECK(partial || f == 1.0, OSLO_ERR_NOT_SUPPORTED, src, ": partial_rotary_factor ", f,
               " is not supported for this model type (whole heads rotate)");
    if (partial) *partial = f;
  }
  std::string type = rd.string("rope_type", rd.string("type", "default"));
  if (type == "default") {
    r->scaling = RopeScaling::NONE;
  } else if (type == "linear") {
    r->scaling = RopeScaling::LINEAR;
    r->factor = rd.number("factor", 1.0);
  } else if (type == "llama3") {
    r->scaling = RopeScaling::WAVELENGTH_BANDS;
    r->factor = rd.number("factor", 8.0);
    r->low_freq_factor = rd.number("low_freq_factor", 1.0);
    r->high_freq_factor = rd.number("high_freq_factor", 4.0);
    r->original_max_positions = rd.positive("original_max_position_embeddings", 8192, false);
  } else {
    throw Error(OSLO_ERR_NOT_SUPPORTED,
                str(src, ": rope type \"", type, "\" is not supported (default, linear, llama3)"));
  }
  OSLO_CHECK(r->theta > 0 && r->factor > 0, OSLO_ERR_FORMAT, src,
             ": rope_theta and factor must be positive");
}

}  // namespace arch
}  // namespace oslo
