#include "core/model/config.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/common/error.hpp"
#include "core/model/arch/arch.hpp"

namespace oslo {

int64_t ModelConfig::rotary_dims() const {
  if (!traits.rotary) return 0;
  const int64_t n = static_cast<int64_t>(static_cast<double>(head_dim) * traits.rotary_fraction);
  return n - n % 2;
}

ModelConfig ModelConfig::parse(const std::string& text, const std::string& src) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(OSLO_ERR_FORMAT, str(src, ": invalid JSON: ", e.what()));
  }
  OSLO_CHECK(j.is_object(), OSLO_ERR_FORMAT, src, ": must be a JSON object");
  arch::ConfigReader rd{j, src};
  ModelConfig c;
  c.json_text = text;
  OSLO_CHECK(rd.has("model_type"), OSLO_ERR_FORMAT, src, ": missing \"model_type\"");
  c.model_type = rd.string("model_type", "");
  c.torch_dtype = rd.string("torch_dtype", rd.string("dtype", ""));
  c.vocab_size = rd.positive("vocab_size", 0);
  arch::find(c.model_type, src).read_config(rd, &c);
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.head_dim == 0) {
    OSLO_CHECK(c.hidden_size % c.num_heads == 0, OSLO_ERR_FORMAT, src, ": hidden size ",
               c.hidden_size, " is not divisible by the number of attention heads ", c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  OSLO_CHECK(c.num_heads % c.num_kv_heads == 0, OSLO_ERR_FORMAT, src, ": attention heads (",
             c.num_heads, ") are not a multiple of the key/value heads (", c.num_kv_heads, ")");
  OSLO_CHECK(!c.traits.rotary || c.head_dim % 2 == 0, OSLO_ERR_FORMAT, src,
             ": rotary embeddings need an even head_dim, got ", c.head_dim);
  OSLO_CHECK(!c.traits.rotary || (c.traits.rotary_fraction > 0 && c.traits.rotary_fraction <= 1 &&
                                  c.rotary_dims() >= 2),
             OSLO_ERR_FORMAT, src, ": the rotary share of head_dim (", c.traits.rotary_fraction,
             " of ", c.head_dim, ") must be in (0, 1] and cover at least 2 dimensions");
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
  // nn.Embedding's padding_idx: negative counts from the end; one outside
  // [-vocab, vocab) makes torch refuse to build the model, oslo masks
  // nothing.
  if (c.traits.embed_padding_idx && rd.has("pad_token_id")) {
    const int64_t row = c.pad_token_id < 0 ? c.pad_token_id + c.vocab_size : c.pad_token_id;
    if (row >= 0 && row < c.vocab_size) c.embed_pad_row = row;
  }
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
