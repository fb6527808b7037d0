// A llama.cpp .gguf file as a WeightSource: its tensors listed under their
// Hugging Face names and shapes (GGUF dims reversed; the rotary row order of
// llama's q/k projections undone at read; GPT-2's projections, stored
// [out, in], listed in Hugging Face's Conv1D layout [in, out] and
// transposed at read unless their blocks are read), block-quantized tensors listed
// with ManifestTensor::quant and read either as their blocks (U8) or
// dequantized (F32/F16/BF16), and the config.json transformers would have
// for the model, made from the metadata. docs/QUANTIZATION.md ("GGUF
// files") documents the mapping.
#include "core/checkpoint/gguf_source.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/checkpoint/fs_util.hpp"
#include "core/common/convert.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"
#include "core/quant/quant.hpp"

namespace oslo {

namespace st = safetensors;
using json = nlohmann::json;

bool is_gguf_path(const std::string& path) {
  if (path.size() < 5) return false;
  std::string tail = path.substr(path.size() - 5);
  for (char& c : tail) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return tail == ".gguf";
}

const char* gguf_supported_architectures() {
  return "gpt2, llama, qwen2";
}

namespace {

struct Arch {
  const char* gguf;        // general.architecture
  const char* model_type;  // config.json's model_type
  const char* hf_class;    // config.json's architectures[0]
  bool rotary_permuted;    // q/k rows in llama.cpp's rotary order
  bool qkv_bias;           // q/k/v projections have biases
};

const Arch kArchs[] = {
    {"llama", "llama", "LlamaForCausalLM", true, false},
    {"qwen2", "qwen2", "Qwen2ForCausalLM", false, true},
    {"gpt2", "gpt2", "GPT2LMHeadModel", false, true},
};

// GGUF's per-block tensor names and Hugging Face's.
struct BlockName {
  const char* gguf;
  const char* hf;
};
const BlockName kBlockNames[] = {
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
};

// GPT-2's (llama.cpp's convert_hf_to_gguf.py GPT2Model): the projections
// are stored transposed from Hugging Face's Conv1D, as [out, in].
const BlockName kGpt2BlockNames[] = {
    {"attn_norm.weight", "ln_1.weight"},          {"attn_norm.bias", "ln_1.bias"},
    {"attn_qkv.weight", "attn.c_attn.weight"},    {"attn_qkv.bias", "attn.c_attn.bias"},
    {"attn_output.weight", "attn.c_proj.weight"}, {"attn_output.bias", "attn.c_proj.bias"},
    {"ffn_norm.weight", "ln_2.weight"},           {"ffn_norm.bias", "ln_2.bias"},
    {"ffn_up.weight", "mlp.c_fc.weight"},         {"ffn_up.bias", "mlp.c_fc.bias"},
    {"ffn_down.weight", "mlp.c_proj.weight"},     {"ffn_down.bias", "mlp.c_proj.bias"},
};

// "blk.N.rest" -> N and rest; false for other names.
bool split_block_name(const std::string& n, int64_t* layer, std::string* rest) {
  if (n.compare(0, 4, "blk.") != 0) return false;
  size_t i = 4;
  int64_t v = 0;
  while (i < n.size() && std::isdigit(static_cast<unsigned char>(n[i])) && i < 14)
    v = v * 10 + (n[i++] - '0');
  if (i == 4 || i >= n.size() || n[i] != '.') return false;
  *layer = v;
  *rest = n.substr(i + 1);
  return true;
}

}  // namespace

void WeightSource::open_gguf() {
  kind_ = SourceKind::GgufFile;
  gguf_ = std::make_unique<Gguf>(gguf::File::open(path_));
  const gguf::File& g = gguf_->file;
  const std::string where = quote_path(path_);
  const std::string arch_name = g.get_string("general.architecture");
  const Arch* arch = nullptr;
  for (const Arch& a : kArchs)
    if (arch_name == a.gguf) arch = &a;
  OSLO_CHECK(arch, OSLO_ERR_NOT_SUPPORTED, where, ": general.architecture ", quote(arch_name),
             " is not supported (oslo reads GGUF files of: ", gguf_supported_architectures(), ")");
  const std::string A = arch_name + ".";
  auto positive = [&](const std::string& key) {
    const int64_t v = g.get_int(key);
    OSLO_CHECK(v >= 1 && v <= (int64_t{1} << 40), OSLO_ERR_FORMAT, where, ": ", key, " = ", v,
               " must be a positive count");
    return v;
  };
  const int64_t L = positive(A + "block_count"), H = positive(A + "embedding_length"),
                I = positive(A + "feed_forward_length"), NH = positive(A + "attention.head_count");
  const int64_t NKV =
      g.find(A + "attention.head_count_kv") ? positive(A + "attention.head_count_kv") : NH;
  OSLO_CHECK(L <= 100000 && NH % NKV == 0, OSLO_ERR_FORMAT, where, ": ", A, "attention.head_count ",
             NH, " is not a multiple of head_count_kv ", NKV);
  int64_t D = H / NH;
  if (g.find(A + "attention.key_length")) D = positive(A + "attention.key_length");
  OSLO_CHECK(H % NH == 0 || g.find(A + "attention.key_length"), OSLO_ERR_FORMAT, where,
             ": embedding_length ", H, " is not a multiple of head_count ", NH);
  if (g.find(A + "attention.value_length"))
    OSLO_CHECK(g.get_int(A + "attention.value_length") == D, OSLO_ERR_NOT_SUPPORTED, where, ": ", A,
               "attention.value_length ", g.get_int(A + "attention.value_length"),
               " differs from key_length ", D, " (not supported)");
  const int64_t rot = g.get_int(A + "rope.dimension_count", D);
  OSLO_CHECK(rot == D, OSLO_ERR_NOT_SUPPORTED, where, ": ", A, "rope.dimension_count ", rot,
             " differs from the head size ", D, " (partial rotary is not supported for ", arch_name,
             ")");
  const std::string scaling = g.get_string(A + "rope.scaling.type", "none");
  OSLO_CHECK(scaling == "none", OSLO_ERR_NOT_SUPPORTED, where, ": ", A, "rope.scaling.type ",
             quote(scaling), " is not supported (only unscaled rotary embeddings)");

  // Vocabulary: the token list (tokenizer.ggml.tokens), else <arch>.vocab_size.
  int64_t V = 0;
  if (const gguf::Value* v = g.find("tokenizer.ggml.tokens")) {
    OSLO_CHECK(v->type == gguf::ValueType::ARRAY, OSLO_ERR_FORMAT, where,
               ": tokenizer.ggml.tokens must be an array of strings");
    V = static_cast<int64_t>(v->array.size());
  } else {
    V = positive(A + "vocab_size");
  }

  // Tensors, renamed, with the shape the metadata says each must have.
  const bool tied = !g.find_tensor("output.weight");
  const bool gpt2 = arch_name == "gpt2";
  std::map<std::string, std::vector<int64_t>> want;  // HF name -> shape in the file
  std::map<std::string, std::string> gname;          // HF name -> GGUF name
  std::set<std::string> transposed;                  // HF names held transposed in the file
  auto expect = [&](const std::string& gn, const std::string& hf, std::vector<int64_t> shape,
                    bool required) {
    if (!required && !g.find_tensor(gn)) return;
    OSLO_CHECK(g.find_tensor(gn), OSLO_ERR_FORMAT, where, ": tensor ", quote(gn), " is missing (a ",
               arch_name, " model of ", L, " blocks needs it)");
    want[hf] = std::move(shape);
    gname[hf] = gn;
  };
  int64_t P = 0;  // GPT-2's learned positions
  if (gpt2) {
    OSLO_CHECK(tied, OSLO_ERR_NOT_SUPPORTED, where,
               ": tensor \"output.weight\": GPT-2 with a head other than the token table is not "
               "supported");
    OSLO_CHECK(NKV == NH && D * NH == H, OSLO_ERR_FORMAT, where, ": a gpt2 model has ", A,
               "attention.head_count_kv = head_count and a head size of embedding_length / "
               "head_count");
    P = positive(A + "context_length");
    expect("token_embd.weight", "transformer.wte.weight", {V, H}, true);
    expect("position_embd.weight", "transformer.wpe.weight", {P, H}, true);
    expect("output_norm.weight", "transformer.ln_f.weight", {H}, true);
    expect("output_norm.bias", "transformer.ln_f.bias", {H}, true);
    for (int64_t l = 0; l < L; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      const std::string h = "transformer.h." + std::to_string(l) + ".";
      for (const BlockName& n : kGpt2BlockNames) {
        const std::string rest = n.gguf;
        std::vector<int64_t> shape = {H};
        if (rest == "attn_qkv.weight") shape = {3 * H, H};
        if (rest == "attn_qkv.bias") shape = {3 * H};
        if (rest == "attn_output.weight") shape = {H, H};
        if (rest == "ffn_up.weight") shape = {I, H};
        if (rest == "ffn_up.bias") shape = {I};
        if (rest == "ffn_down.weight") shape = {H, I};
        if (shape.size() == 2) transposed.insert(h + n.hf);
        expect(b + rest, h + n.hf, shape, true);
      }
    }
  } else {
    expect("token_embd.weight", "model.embed_tokens.weight", {V, H}, true);
    expect("output_norm.weight", "model.norm.weight", {H}, true);
    if (!tied) expect("output.weight", "lm_head.weight", {V, H}, true);
  }
  for (int64_t l = 0; l < L && !gpt2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const std::string h = "model.layers." + std::to_string(l) + ".";
    for (const BlockName& n : kBlockNames) {
      const std::string rest = n.gguf;
      const bool bias = rest.size() > 5 && rest.compare(rest.size() - 5, 5, ".bias") == 0;
      std::vector<int64_t> shape;
      if (rest == "attn_q.weight") shape = {NH * D, H};
      if (rest == "attn_k.weight" || rest == "attn_v.weight") shape = {NKV * D, H};
      if (rest == "attn_output.weight") shape = {H, NH * D};
      if (rest == "attn_q.bias") shape = {NH * D};
      if (rest == "attn_k.bias" || rest == "attn_v.bias") shape = {NKV * D};
      if (rest == "ffn_gate.weight" || rest == "ffn_up.weight") shape = {I, H};
      if (rest == "ffn_down.weight") shape = {H, I};
      if (rest == "attn_norm.weight" || rest == "ffn_norm.weight") shape = {H};
      expect(b + rest, h + n.hf, shape, bias ? arch->qkv_bias : true);
    }
  }
  std::set<std::string> used;
  for (const auto& kv : gname) used.insert(kv.second);
  for (const gguf::TensorInfo& ti : g.tensors()) {
    if (used.count(ti.name)) continue;
    int64_t layer = 0;
    std::string rest;
    const bool in_block = split_block_name(ti.name, &layer, &rest);
    fail(OSLO_ERR_NOT_SUPPORTED, where, ": tensor ", quote(ti.name),
         in_block && layer >= L ? " belongs to a block past " + A + "block_count"
                                : std::string(" has no Hugging Face counterpart in a ") +
                                      arch->hf_class + " (not supported)");
  }
  const std::string base = fsutil::base_name(path_);
  for (const auto& kv : want) {
    const gguf::TensorInfo& ti = g.tensor(gname[kv.first]);
    std::vector<int64_t> shape;
    for (uint64_t d : ti.shape()) shape.push_back(static_cast<int64_t>(d));
    OSLO_CHECK(shape == kv.second, OSLO_ERR_FORMAT, where, ": tensor ", quote(ti.name), " is ",
               shape_str(shape), " (outermost first) but the metadata (", A,
               "embedding_length, feed_forward_length, attention.head_count(_kv), the token "
               "list) makes it ",
               shape_str(kv.second));
    SourceTensor t;
    t.name = kv.first;
    t.shape = shape;
    const bool tr = transposed.count(kv.first) > 0;
    if (tr) std::reverse(t.shape.begin(), t.shape.end());  // Conv1D's [in, out]
    if (quant::is_quantized(ti.format)) {
      t.dtype = st::Dtype::U8;
      t.quant = static_cast<oslo_dtype>(quant::dtype_of_format(ti.format));
    } else {
      t.dtype = st::from_oslo(static_cast<oslo_dtype>(quant::dtype_of_format(ti.format)));
    }
    SourceShard sh;
    sh.file = base;
    sh.key = ti.name;
    sh.offset = 0;
    sh.length = t.shape.empty() ? 1 : t.shape[0];
    sh.bytes = ti.nbytes;
    t.shards.push_back(sh);
    tensors_.push_back(t);
    Gguf::Entry e;
    e.info = &ti;
    const bool qk = ti.name.size() > 14 && (ti.name.find(".attn_q.") != std::string::npos ||
                                            ti.name.find(".attn_k.") != std::string::npos);
    if (arch->rotary_permuted && qk) e.head_rows = D;
    e.transposed = tr;
    gguf_->entries[kv.first] = e;
  }

  // config.json as transformers would write it for this model.
  json cfg;
  if (gpt2) {
    cfg["architectures"] = json::array({arch->hf_class});
    cfg["model_type"] = arch->model_type;
    cfg["n_embd"] = H;
    cfg["n_inner"] = I;
    cfg["n_layer"] = L;
    cfg["n_head"] = NH;
    cfg["n_positions"] = P;
    cfg["vocab_size"] = V;
    cfg["layer_norm_epsilon"] = g.get_float(A + "attention.layer_norm_epsilon", 1e-5);
    cfg["activation_function"] = "gelu_new";  // ggml_gelu: the tanh form
    cfg["tie_word_embeddings"] = true;
    cfg["torch_dtype"] = "float32";
  }
  if (!gpt2) {
    cfg["architectures"] = json::array({arch->hf_class});
    cfg["model_type"] = arch->model_type;
    cfg["hidden_size"] = H;
    cfg["intermediate_size"] = I;
    cfg["num_hidden_layers"] = L;
    cfg["num_attention_heads"] = NH;
    cfg["num_key_value_heads"] = NKV;
    cfg["head_dim"] = D;
    cfg["hidden_act"] = "silu";
    cfg["vocab_size"] = V;
    cfg["max_position_embeddings"] = g.get_int(A + "context_length", 2048);
    cfg["rms_norm_eps"] = g.get_float(A + "attention.layer_norm_rms_epsilon", 1e-6);
    cfg["rope_theta"] = g.get_float(A + "rope.freq_base", 10000.0);
    cfg["tie_word_embeddings"] = tied;
    cfg["attention_bias"] = arch->qkv_bias;
    cfg["mlp_bias"] = false;
    cfg["torch_dtype"] = "float32";
    if (arch_name == "qwen2") cfg["use_sliding_window"] = false;
  }
  for (const char* k : {"bos", "eos", "padding"}) {
    const std::string key = std::string("tokenizer.ggml.") + k + "_token_id";
    if (!g.find(key)) continue;
    const int64_t id = g.get_int(key);
    OSLO_CHECK(id >= 0 && id < V, OSLO_ERR_FORMAT, where, ": ", key, " = ", id,
               " is not a token id (the vocabulary has ", V, " tokens)");
    cfg[std::string(k) == "padding" ? "pad_token_id" : std::string(k) + "_token_id"] = id;
  }
  config_json_ = cfg.dump(2);
}

bool WeightSource::stored_transposed(const SourceTensor& t) const {
  if (!gguf_) return false;
  auto it = gguf_->entries.find(t.name);
  return it != gguf_->entries.end() && it->second.transposed;
}

void WeightSource::read_box_gguf(const SourceTensor& t, int dim, int64_t start, int64_t len,
                                 st::Dtype out, void* dst) {
  auto it = gguf_->entries.find(t.name);
  OSLO_CHECK(it != gguf_->entries.end(), OSLO_ERR_INVALID_ARGUMENT, "tensor ", quote(t.name),
             " is not a tensor of ", quote_path(path_));
  const Gguf::Entry& e = it->second;
  if (!e.transposed) return read_gguf_stored(t, t.shape, dim, start, len, out, dst);
  // Stored [B, A] for the listed [A, B]: blocks are read as stored (dim
  // counted in the stored shape); any other read is of the stored box,
  // transposed into the listed layout.
  const std::vector<int64_t> stored = {t.shape[1], t.shape[0]};
  if (quant::is_quantized(e.info->format) && out == st::Dtype::U8)
    return read_gguf_stored(t, stored, dim, start, len, out, dst);
  int64_t a = t.shape[0], b = t.shape[1];
  if (dim == 0) a = len;
  if (dim == 1) b = len;
  if (a <= 0 || b <= 0) return;
  const size_t es = st::dtype_bits(out) / 8;
  std::vector<char> box(static_cast<size_t>(a * b) * es);  // [b, a]
  read_gguf_stored(t, stored, dim < 0 ? -1 : 1 - dim, start, len, out, box.data());
  char* d = static_cast<char*>(dst);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      std::memcpy(d + static_cast<size_t>(i * b + j) * es,
                  box.data() + static_cast<size_t>(j * a + i) * es, es);
}

void WeightSource::read_gguf_stored(const SourceTensor& t, const std::vector<int64_t>& shape,
                                    int dim, int64_t start, int64_t len, st::Dtype out, void* dst) {
  const Gguf::Entry& e = gguf_->entries.at(t.name);
  const gguf::TensorInfo& ti = *e.info;
  const quant::Format f = ti.format;
  const int nd = static_cast<int>(shape.size());
  OSLO_CHECK(nd <= 2 || dim < 0, OSLO_ERR_NOT_SUPPORTED, "tensor ", quote(t.name), ": a box of a ",
             nd, "-D GGUF tensor can only be read whole");
  // The tensor as rows of C elements; the box as rows [r0, r1), columns [c0, c1).
  const int64_t C = nd == 0 ? 1 : shape[nd - 1];
  const int64_t R = C == 0 ? 0 : static_cast<int64_t>(ti.elements) / std::max<int64_t>(C, 1);
  int64_t r0 = 0, r1 = R, c0 = 0, c1 = C;
  if (dim >= 0 && dim == nd - 1) {
    c0 = start;
    c1 = start + len;
  } else if (dim >= 0) {
    r0 = start;
    r1 = start + len;
  }
  if (r1 <= r0 || c1 <= c0) return;
  const bool block = quant::is_quantized(f);
  const oslo_dtype stored = static_cast<oslo_dtype>(quant::dtype_of_format(f));
  oslo_dtype want = OSLO_DTYPE_F32;
  const bool raw = out == t.dtype;
  if (!raw)
    OSLO_CHECK(st::to_oslo(out, &want) && dtype_is_float(want), OSLO_ERR_DTYPE, "tensor ",
               quote(t.name), ": cannot read ", block ? quant::format_name(f) : dtype_name(stored),
               " as ", st::dtype_name(out));
  if (raw && block)
    quant::check_shard_range(f, t.name, {static_cast<uint64_t>(R), static_cast<uint64_t>(C)}, 1,
                             static_cast<uint64_t>(c0), static_cast<uint64_t>(c1));
  const uint64_t rb = quant::row_bytes(f, static_cast<uint64_t>(C), t.name);
  const uint8_t* base = gguf_->file.view(ti).data;
  const size_t os = raw ? 1 : dtype_size(want);
  // Bytes of one box row in `dst`.
  const size_t drow =
      raw ? (block ? static_cast<size_t>((c1 - c0) / static_cast<int64_t>(quant::block_elems(f)) *
                                         quant::block_bytes(f))
                   : static_cast<size_t>(c1 - c0) * dtype_size(stored))
          : static_cast<size_t>(c1 - c0) * os;
  std::vector<float> row;
  char* d = static_cast<char*>(dst);
  for (int64_t r = r0; r < r1; ++r, d += drow) {
    int64_t g = r;
    if (e.head_rows > 0) {
      // HF row h*D + i*(D/2) + j is GGUF row h*D + 2*j + i (LlamaModel.permute).
      const int64_t D = e.head_rows, h = r / D, w = r % D, half = D / 2;
      const int64_t i = w / half, j = w % half;
      g = h * D + 2 * j + i;
    }
    const uint8_t* src = base + static_cast<uint64_t>(g) * rb;
    if (raw) {
      const size_t off =
          block ? static_cast<size_t>(c0 / static_cast<int64_t>(quant::block_elems(f)) *
                                      quant::block_bytes(f))
                : static_cast<size_t>(c0) * dtype_size(stored);
      std::memcpy(d, src + off, drow);
    } else if (block) {
      row.resize(static_cast<size_t>(C));
      quant::dequantize_row(f, src, row.data(), static_cast<uint64_t>(C));
      convert_host(OSLO_DTYPE_F32, row.data() + c0, want, d, static_cast<size_t>(c1 - c0), t.name);
    } else {
      convert_host(stored, src + static_cast<size_t>(c0) * dtype_size(stored), want, d,
                   static_cast<size_t>(c1 - c0), t.name);
    }
    bytes_read_ += block ? (raw ? drow : rb) : static_cast<uint64_t>(c1 - c0) * dtype_size(stored);
    ++read_calls_;
  }
}

}  // namespace oslo
