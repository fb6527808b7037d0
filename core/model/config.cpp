#include "core/model/config.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/common/error.hpp"

namespace oslo {

namespace {

using json = nlohmann::json;

struct Reader {
  const json& j;
  const std::string& src;

  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }
  int64_t integer(const char* key, int64_t def, bool required = false) const {
    if (!has(key)) {
      OSLO_CHECK(!required, OSLO_ERR_FORMAT, src, ": missing \"", key, "\"");
      return def;
    }
    const json& v = j.at(key);
    OSLO_CHECK(v.is_number_integer(), OSLO_ERR_FORMAT, src, ": \"", key,
               "\" must be an integer, got ", v.dump().substr(0, 64));
    return v.get<int64_t>();
  }
  int64_t positive(const char* key, int64_t def, bool required = true) const {
    const int64_t v = integer(key, def, required);
    OSLO_CHECK(v > 0 && v < (int64_t{1} << 40), OSLO_ERR_FORMAT, src, ": \"", key,
               "\" must be a positive integer, got ", v);
    return v;
  }
  double number(const char* key, double def) const {
    if (!has(key)) return def;
    const json& v = j.at(key);
    OSLO_CHECK(v.is_number(), OSLO_ERR_FORMAT, src, ": \"", key, "\" must be a number");
    return v.get<double>();
  }
  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    const json& v = j.at(key);
    OSLO_CHECK(v.is_boolean(), OSLO_ERR_FORMAT, src, ": \"", key, "\" must be true or false");
    return v.get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    const json& v = j.at(key);
    OSLO_CHECK(v.is_string(), OSLO_ERR_FORMAT, src, ": \"", key, "\" must be a string");
    return v.get<std::string>();
  }
};

Activation activation(const std::string& name, const std::string& src) {
  if (name == "gelu") return Activation::GELU;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
    return Activation::GELU_TANH;
  if (name == "silu" || name == "swish") return Activation::SILU;
  if (name == "relu") return Activation::RELU;
  throw Error(OSLO_ERR_NOT_SUPPORTED, str(src, ": activation \"", name,
                                          "\" is not supported (gelu, gelu_new, silu, relu)"));
}

void read_rope(const json& obj, const std::string& src, RopeConfig* r) {
  OSLO_CHECK(obj.is_object(), OSLO_ERR_FORMAT, src, ": rope parameters must be an object");
  Reader rd{obj, src};
  r->theta = rd.number("rope_theta", r->theta);
  std::string type = rd.string("rope_type", rd.string("type", "default"));
  if (type == "default") {
  } else if (type == "linear") {
    r->factor = rd.number("factor", 1.0);
  } else if (type == "llama3") {
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
  r->type = type;
}

}  // namespace

ModelConfig ModelConfig::parse(const std::string& text, const std::string& src) {
  nlohmann::json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(OSLO_ERR_FORMAT, str(src, ": invalid JSON: ", e.what()));
  }
  OSLO_CHECK(j.is_object(), OSLO_ERR_FORMAT, src, ": must be a JSON object");
  Reader rd{j, src};
  ModelConfig c;
  c.json_text = text;
  OSLO_CHECK(rd.has("model_type"), OSLO_ERR_FORMAT, src, ": missing \"model_type\"");
  c.model_type = rd.string("model_type", "");
  c.torch_dtype = rd.string("torch_dtype", rd.string("dtype", ""));
  c.vocab_size = rd.positive("vocab_size", 0);
  if (c.model_type == "gpt2") {
    c.family = Family::GPT2;
    c.hidden_size = rd.positive("n_embd", 0);
    c.num_layers = rd.positive("n_layer", 0);
    c.num_heads = rd.positive("n_head", 0);
    c.max_positions = rd.positive("n_positions", 1024, false);
    c.intermediate_size = rd.has("n_inner") ? rd.positive("n_inner", 0) : 4 * c.hidden_size;
    c.norm_eps = rd.number("layer_norm_epsilon", 1e-5);
    c.act = activation(rd.string("activation_function", "gelu_new"), src);
    c.tie_word_embeddings = rd.boolean("tie_word_embeddings", true);
    OSLO_CHECK(!rd.boolean("scale_attn_by_inverse_layer_idx", false), OSLO_ERR_NOT_SUPPORTED, src,
               ": scale_attn_by_inverse_layer_idx is not supported");
    OSLO_CHECK(rd.boolean("scale_attn_weights", true), OSLO_ERR_NOT_SUPPORTED, src,
               ": scale_attn_weights = false is not supported");
    OSLO_CHECK(c.tie_word_embeddings, OSLO_ERR_NOT_SUPPORTED, src,
               ": GPT-2 with an untied lm_head is not supported");
  } else if (c.model_type == "bert") {
    c.family = Family::BERT;
    c.hidden_size = rd.positive("hidden_size", 0);
    c.num_layers = rd.positive("num_hidden_layers", 0);
    c.num_heads = rd.positive("num_attention_heads", 0);
    c.intermediate_size = rd.positive("intermediate_size", 0);
    c.max_positions = rd.positive("max_position_embeddings", 512, false);
    c.type_vocab_size = rd.positive("type_vocab_size", 2, false);
    c.norm_eps = rd.number("layer_norm_eps", 1e-12);
    c.act = activation(rd.string("hidden_act", "gelu"), src);
    const std::string pe = rd.string("position_embedding_type", "absolute");
    OSLO_CHECK(pe == "absolute", OSLO_ERR_NOT_SUPPORTED, src, ": position_embedding_type \"", pe,
               "\" is not supported (absolute)");
  } else if (c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2") {
    c.family = Family::LLAMA;
    c.hidden_size = rd.positive("hidden_size", 0);
    c.num_layers = rd.positive("num_hidden_layers", 0);
    c.num_heads = rd.positive("num_attention_heads", 0);
    c.num_kv_heads = rd.positive("num_key_value_heads", c.num_heads, false);
    c.intermediate_size = rd.positive("intermediate_size", 0);
    c.max_positions = rd.positive("max_position_embeddings", 2048, false);
    c.norm_eps = rd.number("rms_norm_eps", 1e-6);
    c.act = activation(rd.string("hidden_act", "silu"), src);
    c.tie_word_embeddings = rd.boolean("tie_word_embeddings", false);
    if (rd.has("head_dim")) c.head_dim = rd.positive("head_dim", 0);
    if (c.model_type == "qwen2") {
      c.qkv_bias = true;
    } else {
      c.qkv_bias = c.o_bias = rd.boolean("attention_bias", false);
      c.mlp_bias = rd.boolean("mlp_bias", false);
    }
    c.rope.theta = rd.number("rope_theta", 10000.0);
    if (rd.has("rope_scaling")) read_rope(j.at("rope_scaling"), src, &c.rope);
    if (rd.has("rope_parameters")) read_rope(j.at("rope_parameters"), src, &c.rope);
    if (c.model_type == "mistral" ||
        (c.model_type == "qwen2" && rd.boolean("use_sliding_window", false)))
      c.sliding_window = rd.has("sliding_window") ? rd.positive("sliding_window", 0) : 0;
  } else {
    throw Error(OSLO_ERR_NOT_SUPPORTED,
                str(src, ": model_type \"", c.model_type,
                    "\" is not supported (gpt2, bert, llama, mistral, qwen2)"));
  }
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.head_dim == 0) {
    OSLO_CHECK(c.hidden_size % c.num_heads == 0, OSLO_ERR_FORMAT, src, ": hidden size ",
               c.hidden_size, " is not divisible by the number of attention heads ", c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  OSLO_CHECK(c.num_heads % c.num_kv_heads == 0, OSLO_ERR_FORMAT, src, ": attention heads (",
             c.num_heads, ") are not a multiple of the key/value heads (", c.num_kv_heads, ")");
  OSLO_CHECK(c.family != Family::LLAMA || c.head_dim % 2 == 0, OSLO_ERR_FORMAT, src,
             ": rotary embeddings need an even head_dim, got ", c.head_dim);
  if (rd.has("eos_token_id")) {
    const nlohmann::json& e = j.at("eos_token_id");
    if (e.is_array()) {
      for (const nlohmann::json& v : e) {
        OSLO_CHECK(v.is_number_integer(), OSLO_ERR_FORMAT, src,
                   ": eos_token_id entries must be integers");
        c.eos_token_ids.push_back(v.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(rd.integer("eos_token_id", -1));
    }
  }
  c.bos_token_id = rd.integer("bos_token_id", -1);
  c.pad_token_id = rd.integer("pad_token_id", -1);
  return c;
}

ModelConfig ModelConfig::read(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream f(path, std::ios::binary);
  OSLO_CHECK(f.good(), OSLO_ERR_IO, "cannot open ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  OSLO_CHECK(ss.str().size() < (64u << 20), OSLO_ERR_FORMAT, path, " is larger than 64 MiB");
  return parse(ss.str(), path);
}

}  // namespace oslo
