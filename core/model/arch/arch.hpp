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
