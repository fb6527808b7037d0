// liboslo_sentencepiece.so: libsentencepiece behind a C table (oslo_spm.h).
// Built with hidden visibility and a version script: its one exported symbol
// is oslo_spm_api_v1; libsentencepiece (and its bundled protobuf-lite) stays
// in the local scope of liboslo's dlopen.
#include <sentencepiece_processor.h>

#include <exception>
#include <new>
#include <string>
#include <vector>

#include "oslo_spm.h"

struct oslo_spm_model {
  sentencepiece::SentencePieceProcessor sp;
};

namespace {

// The last error of the calling thread.
thread_local std::string t_error;

const char* set_error(std::string msg) {
  t_error = std::move(msg);
  return t_error.c_str();
}

bool valid(const oslo_spm_model* m, int32_t id) {
  return m && id >= 0 && id < m->sp.GetPieceSize();
}

oslo_spm_model* load(const char* bytes, size_t size, uint32_t flags, const char** error) {
  try {
    std::string proto(bytes ? bytes : "", bytes ? size : 0);
    // A protobuf message repeated at the end is merged into the first one:
    // appending {field 3 (normalizer_spec): {field 3 (add_dummy_prefix): 0}}
    // overrides just that flag.
    if (flags & OSLO_SPM_NO_DUMMY_PREFIX) proto.append("\x1a\x02\x18\x00", 4);
    auto* m = new oslo_spm_model;
    auto st = m->sp.LoadFromSerializedProto(proto);
    if (!st.ok()) {
      delete m;
      const char* e = set_error(st.ToString());
      if (error) *error = e;
      return nullptr;
    }
    return m;
  } catch (const std::exception& e) {
    const char* msg = set_error(e.what());
    if (error) *error = msg;
  } catch (...) {
    const char* msg = set_error("unknown error in libsentencepiece");
    if (error) *error = msg;
  }
  return nullptr;
}

void free_model(oslo_spm_model* m) {
  delete m;
}

int32_t piece_count(const oslo_spm_model* m) {
  return m ? m->sp.GetPieceSize() : 0;
}

uint32_t piece_flags(const oslo_spm_model* m, int32_t id) {
  if (!valid(m, id)) return 0;
  uint32_t f = 0;
  if (m->sp.IsControl(id)) f |= OSLO_SPM_PIECE_CONTROL;
  if (m->sp.IsUnknown(id)) f |= OSLO_SPM_PIECE_UNKNOWN;
  if (m->sp.IsByte(id)) f |= OSLO_SPM_PIECE_BYTE;
  return f;
}

const char* id_to_piece(const oslo_spm_model* m, int32_t id, size_t* size) {
  if (!valid(m, id)) {
    if (size) *size = 0;
    return nullptr;
  }
  const std::string& p = m->sp.IdToPiece(id);
  if (size) *size = p.size();
  return p.data();
}

int32_t piece_to_id(const oslo_spm_model* m, const char* piece, size_t size) {
  if (!m) return -1;
  return m->sp.PieceToId(absl::string_view(piece ? piece : "", piece ? size : 0));
}

int32_t bos_id(const oslo_spm_model* m) {
  return m ? m->sp.bos_id() : -1;
}
int32_t eos_id(const oslo_spm_model* m) {
  return m ? m->sp.eos_id() : -1;
}
int32_t pad_id(const oslo_spm_model* m) {
  return m ? m->sp.pad_id() : -1;
}
int32_t unk_id(const oslo_spm_model* m) {
  return m ? m->sp.unk_id() : -1;
}

int encode(const oslo_spm_model* m, const char* text, size_t size, int32_t* ids, size_t capacity,
           size_t* count, const char** error) {
  try {
    if (!m || !count) {
      const char* e = set_error("encode: no model or no count");
      if (error) *error = e;
      return -1;
    }
    std::vector<int> out;
    auto st = m->sp.Encode(absl::string_view(text ? text : "", text ? size : 0), &out);
    if (!st.ok()) {
      const char* e = set_error(st.ToString());
      if (error) *error = e;
      return -1;
    }
    *count = out.size();
    for (size_t i = 0; i < out.size() && i < capacity; ++i) ids[i] = out[i];
    return 0;
  } catch (const std::exception& e) {
    const char* msg = set_error(e.what());
    if (error) *error = msg;
  } catch (...) {
    const char* msg = set_error("unknown error in libsentencepiece");
    if (error) *error = msg;
  }
  return -1;
}

const oslo_spm_api kApi = {
    sizeof(oslo_spm_api),
    OSLO_SPM_API_VERSION,
    load,
    free_model,
    piece_count,
    piece_flags,
    id_to_piece,
    piece_to_id,
    bos_id,
    eos_id,
    pad_id,
    unk_id,
    encode,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const oslo_spm_api* oslo_spm_api_v1(void) {
  return &kApi;
}
