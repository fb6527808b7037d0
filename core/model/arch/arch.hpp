// The architecture registry: one entry per Hugging Face model_type, each in
// its family's file (core/model/arch/<family>.cpp), listed in registry.cpp.
// An entry holds everything the family needs: its config.json reader (which
// fills the sizes and the BlockTraits the blocks are built from), its
// sharding rules table and the prefix its base-model checkpoints lack.
// Nothing outside this folder names a family (ctest
// model_no_family_outside_arch checks it); docs/MODELS.md has the recipe
// for adding one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/model/config.hpp"
#include "core/model/sharding.hpp"

namespace oslo {
namespace arch {

// Typed reads of one JSON object with config.json's error messages
// (OSLO_ERR_FORMAT naming the file and the key). A key set to null counts
// as absent.
struct ConfigReader {
  const nlohmann::json& j;
  const std::string& src;  // file name for messages

  bool has(const char* key) const;
  const nlohmann::json& at(const char* key) const { return j.at(key); }
  // An integer; `def` when absent unless `required`.
  int64_t integer(const char* key, int64_t def, bool required = false) const;
  // An integer in [1, 2^40); required unless told otherwise.
  int64_t positive(const char* key, int64_t def, bool required = true) const;
  double number(const char* key, double def) const;
  bool boolean(const char* key, bool def) const;
  std::string string(const char* key, const std::string& def) const;
};

// Hugging Face's activation names (hidden_act, activation_function).
// OSLO_ERR_NOT_SUPPORTED for others.
Activation activation(const std::string& name, const std::string& src);

// Reads a rope_scaling (4.x) or rope_parameters (5.x) object into r:
// rope_theta, rope_type (default, linear, llama3) and its parameters; and
// partial_rotary_factor into *partial (OSLO_ERR_NOT_SUPPORTED if the object
// has one other than 1 and partial is null: the family rotates whole heads).
void read_rope(const nlohmann::json& obj, const std::string& src, RopeConfig* r,
               double* partial = nullptr);

// The families with LLaMA's blocks (llama.cpp: llama, mistral, qwen2;
// phi3.cpp; gemma.cpp) share one config reader and start from LLaMA's
// sharding table.

// LLaMA's sharding rules: separate q/k/v projections with optional biases,
// gate/up/down with optional biases, an untied head. A fresh copy each call
// (safe during static initialisation, unlike another file's table).
std::vector<ShardRule> llama_rules();

// A table made from `base`: each row whose role is a `replace` key swapped
// for its row, then the rows whose roles `drop` lists removed; the order is
// base's. OSLO_ERR_INTERNAL if a role names no row (a bug in a family file).
std::vector<ShardRule> derive_rules(
    std::vector<ShardRule> base, const std::vector<std::string>& drop,
    const std::vector<std::pair<std::string, ShardRule>>& replace = {});

// When a llama-like config has a sliding window.
enum class SlidingWindow {
  NONE,          // never (LLaMA, Gemma)
  WHEN_SET,      // when sliding_window is set (Mistral, Phi-3)
  WHEN_ENABLED,  // when use_sliding_window is true too (Qwen2)
};

// What the llama-like families' config.json readers differ in; the
// defaults are LLaMA's.
struct LlamaLike {
  int64_t max_positions = 2048;  // max_position_embeddings when absent
  double norm_eps = 1e-6;        // rms_norm_eps when absent
  bool tied = false;             // tie_word_embeddings when absent
  // head_dim when absent; 0: hidden_size / num_attention_heads.
  int64_t head_dim = 0;
  // Reads the MLP activation; null: hidden_act, "silu" when absent.
  Activation (*activation)(const ConfigReader& rd) = nullptr;
  bool attention_bias_key = true;  // attention_bias gives q, k, v and o biases
  bool qkv_bias = false;           // q, k, v biases whatever the config says
  bool mlp_bias_key = true;        // mlp_bias gives gate, up and down biases
  SlidingWindow sliding_window = SlidingWindow::NONE;
  // partial_rotary_factor (top level or in the rope object) rotates part of
  // each head; false: whole heads (a factor other than 1 in the rope object
  // is refused).
  bool partial_rotary = false;
  // Called with rope_scaling and rope_parameters before each is read (to
  // refuse what read_rope would misread); null: none.
  void (*check_rope)(const ConfigReader& rd, const char* key) = nullptr;
};

// The llama-like reader: sizes, RMSNorm, rope (4.x rope_theta +
// rope_scaling, 5.x rope_parameters, which wins), the gated MLP, biases and
// the window as `f` says, and c->traits (causal, RMS norm, rotary, gated
// MLP, padding_idx embeddings). Errors as ConfigReader's and read_rope's.
void read_llama_like(const ConfigReader& rd, const LlamaLike& f, ModelConfig* c);

// One model_type.
struct Arch {
  const char* model_type;  // config.json's model_type
  const char* hf_class;    // the Hugging Face class its rules name tensors for
  // Reads the family's fields: sizes, activation, norm, rope, biases, and
  // c->traits. The fields every family shares (model_type, vocab_size,
  // dtype, bos/eos/pad ids) are read before, the derived ones (head_dim
  // when 0, kv heads when 0) and the common checks after.
  void (*read_config)(const ConfigReader& rd, ModelConfig* c);
  const std::vector<ShardRule>* rules;
  // Prefix of the rules' names that checkpoints of the base model lack, or
  // that the head class adds ("transformer." for GPT2Model vs
  // GPT2LMHeadModel); "" if none.
  const char* base_prefix;
};

// The entry of a model_type; OSLO_ERR_NOT_SUPPORTED naming the supported
// ones if there is none.
const Arch& find(const std::string& model_type, const std::string& src);

// Every registered entry, in registration order.
const std::vector<const Arch*>& all();

}  // namespace arch
}  // namespace oslo
