/* The C table of liboslo_sentencepiece.so, the shim through which liboslo
 * uses libsentencepiece for SentencePiece tokenizer.model files.
 *
 * Why a shim: libsentencepiece exports its own bundled copy of protobuf-lite
 * (google::protobuf::...). Linked into liboslo it would sit in the process's
 * global symbol scope, where a later libprotobuf (libtorch's, or the
 * embedding application's) binds to it and crashes in its static
 * initialisers. liboslo instead dlopen()s this shim with RTLD_LOCAL the first
 * time a .model tokenizer is loaded; the shim exports only the one entry
 * point below, so neither it nor the libsentencepiece it brings is visible
 * to anything else.
 *
 * Only C types cross this table. Version 1: a caller accepts a table whose
 * version is OSLO_SPM_API_VERSION and whose struct_size covers the entries
 * it uses; later versions only append entries. */
#ifndef OSLO_SPM_H
#define OSLO_SPM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OSLO_SPM_API_VERSION 1u
/** The shim's file name and its one exported symbol. */
#define OSLO_SPM_LIBRARY "liboslo_sentencepiece.so"
#define OSLO_SPM_API_SYMBOL "oslo_spm_api_v1"

/** A loaded SentencePiece model (opaque). */
typedef struct oslo_spm_model oslo_spm_model;

/** load() flag: turn the model's normalizer_spec.add_dummy_prefix off. */
#define OSLO_SPM_NO_DUMMY_PREFIX 1u

/** piece_flags() bits. */
#define OSLO_SPM_PIECE_CONTROL 1u
#define OSLO_SPM_PIECE_UNKNOWN 2u
#define OSLO_SPM_PIECE_BYTE 4u

typedef struct oslo_spm_api {
  size_t struct_size; /**< sizeof(oslo_spm_api) of the shim */
  uint32_t version;   /**< OSLO_SPM_API_VERSION */

  /** Loads a model from the bytes of a serialized ModelProto (the content of
   * a tokenizer.model file); flags: 0 or OSLO_SPM_NO_DUMMY_PREFIX. Returns
   * NULL on failure with *error (if error is not NULL) set to a message that
   * stays valid until the calling thread's next call into the shim.
   * Thread-safe. Free the model with free_model. */
  oslo_spm_model *(*load)(const char *bytes, size_t size, uint32_t flags, const char **error);
  /** Frees a model (NULL is ignored). */
  void (*free_model)(oslo_spm_model *model);

  /* The accessors below are const and thread-safe on one model. */

  /** Number of pieces (the vocabulary size). */
  int32_t (*piece_count)(const oslo_spm_model *model);
  /** OSLO_SPM_PIECE_* bits of a piece; 0 for an id out of range. */
  uint32_t (*piece_flags)(const oslo_spm_model *model, int32_t id);
  /** The piece of an id (UTF-8, not NUL-terminated: *size bytes) or NULL
   * for an id out of range. The bytes live as long as the model. */
  const char *(*id_to_piece)(const oslo_spm_model *model, int32_t id, size_t *size);
  /** The id of a piece; unk_id() when the model has no such piece. */
  int32_t (*piece_to_id)(const oslo_spm_model *model, const char *piece, size_t size);
  /** The model's special ids; -1 where it has none. */
  int32_t (*bos_id)(const oslo_spm_model *model);
  int32_t (*eos_id)(const oslo_spm_model *model);
  int32_t (*pad_id)(const oslo_spm_model *model);
  int32_t (*unk_id)(const oslo_spm_model *model);

  /** Encodes text (UTF-8, size bytes) into ids. Returns 0 with *count set to
   * the number of ids; when *count > capacity only the first capacity ids
   * were written, and the caller calls again with a buffer of *count.
   * Returns -1 on failure with *error set as for load. */
  int (*encode)(const oslo_spm_model *model, const char *text, size_t size, int32_t *ids,
                size_t capacity, size_t *count, const char **error);
} oslo_spm_api;

/** The shim's one exported function: its table (static, never NULL). */
typedef const oslo_spm_api *(*oslo_spm_api_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* OSLO_SPM_H */
