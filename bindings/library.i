/*
 * library.i - the library-wide calls of include/oslo.h for every language:
 * the version, status names, checkpoint merge/reshard/inspect and
 * pad_batch (module functions of capi, renamed in oslo.i).
 *
 * Included by bindings/oslo.i after oslo.h, first of the per-area files
 * (library.i, tensor.i, layers.i, model.i, train.i, tokenizer.i); uses the
 * support code of oslo.i (oslo_bind_check, oslo_bind_fail) and records
 * every status as the rest of oslo.i does. The language layers: Python
 * oslo/_train.py (merge, reshard, inspect) and oslo/_inputs.py
 * (pad_batch), Java org/oslo/Oslo.java, Go oslo/model.go and oslo/texts.go.
 */

/* ------------------------------------------------------------------------ */
/* Library                                                                   */
/* ------------------------------------------------------------------------ */

%inline %{
/* Run-time version of the library ("0.3.0"). */
static const char *bind_version_string(void) { return oslo_version_string(); }

/* Static name of a status ("OSLO_ERR_TIMEOUT: timed out"). */
static const char *bind_status_string(int status) {
  return oslo_status_string((oslo_status)status);
}

/* oslo_model_merge with its options as arguments; dtype -1 keeps. */
static void bind_model_merge(const char *src, const char *dst, int dtype,
                             unsigned long long max_shard_bytes, int overwrite) {
  oslo_merge_options o;
  if (!oslo_bind_check(oslo_merge_options_init(&o, OSLO_MERGE_OPTIONS_VERSION))) return;
  o.dtype = dtype;
  o.max_shard_bytes = (uint64_t)max_shard_bytes;
  o.overwrite = overwrite;
  oslo_bind_check(oslo_model_merge(src, dst, &o));
}

static void bind_model_reshard(const char *src, const char *dst, int tensor_parallel_size) {
  oslo_bind_check(oslo_model_reshard(src, dst, tensor_parallel_size));
}

/* oslo_pad_batch of the rows of int64 ids held back to back in `ids`, row
   i being lengths[i] ids (int64, one per row), with the options' fields as
   arguments (sides: 0 right, 1 left; max_length 0: no limit). Writes the
   ids to out and the mask to out_mask (int64 [n, L] each; None: only
   sizes; out_mask may be None) when out holds n * L values; returns L. */
static size_t bind_pad_batch(const void *ids, size_t ids_bytes, const void *lengths,
                             size_t lengths_bytes, int padding_side, int64_t pad_id,
                             int64_t max_length, int truncation, int truncation_side,
                             int pad_to_max_length, void *out, size_t out_bytes, void *out_mask,
                             size_t out_mask_bytes) {
  const int64_t *lens = (const int64_t *)lengths, *all = (const int64_t *)ids;
  size_t n = lengths_bytes / 8, len = 0, off = 0, have = ids_bytes / 8, i;
  const int64_t **rows;
  size_t *sizes;
  oslo_pad_batch_options o;
  if (lengths_bytes % 8 || ids_bytes % 8) {
    oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                   "pad_batch: ids hold %llu bytes and lengths %llu, not whole numbers of int64",
                   (unsigned long long)ids_bytes, (unsigned long long)lengths_bytes);
    return 0;
  }
  if (max_length < 0) {
    oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT, "pad_batch: max_length %lld is negative",
                   (long long)max_length);
    return 0;
  }
  if (out && out_mask && out_mask_bytes < out_bytes) {
    oslo_bind_fail(OSLO_ERR_SHAPE, "pad_batch: the mask holds %llu bytes, the ids %llu",
                   (unsigned long long)out_mask_bytes, (unsigned long long)out_bytes);
    return 0;
  }
  if (!oslo_bind_check(oslo_pad_batch_options_init(&o, OSLO_PAD_BATCH_OPTIONS_VERSION))) return 0;
  o.padding_side = (oslo_side)padding_side;
  o.pad_id = pad_id;
  o.max_length = (size_t)max_length;
  o.truncation = truncation;
  o.truncation_side = (oslo_side)truncation_side;
  o.pad_to_max_length = pad_to_max_length;
  rows = (const int64_t **)calloc(n ? n : 1, sizeof *rows);
  sizes = (size_t *)calloc(n ? n : 1, sizeof *sizes);
  if (!rows || !sizes) {
    free((void *)rows);
    free(sizes);
    oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "pad_batch: %llu rows", (unsigned long long)n);
    return 0;
  }
  for (i = 0; i < n; ++i) {
    if (lens[i] < 0 || (unsigned long long)lens[i] > have - off) {
      oslo_bind_fail(OSLO_ERR_INVALID_ARGUMENT,
                     "pad_batch: row %llu's length %lld runs past the %llu ids",
                     (unsigned long long)i, (long long)lens[i], (unsigned long long)have);
      break;
    }
    rows[i] = all ? all + off : NULL;
    sizes[i] = (size_t)lens[i];
    off += (size_t)lens[i];
  }
  if (i == n)
    oslo_bind_check(oslo_pad_batch(rows, sizes, n, &o, (int64_t *)out,
                                   out ? (int64_t *)out_mask : NULL, out_bytes / 8, &len));
  free((void *)rows);
  free(sizes);
  return len;
}

/* oslo_checkpoint_inspect: the whole description (text, or JSON if json). */
static char *bind_checkpoint_inspect(const char *path, int json) {
  size_t len = 0;
  char *buf;
  if (!oslo_bind_check(oslo_checkpoint_inspect(path, json, NULL, 0, &len))) return NULL;
  buf = (char *)malloc(len + 1);
  if (!buf) {
    oslo_bind_fail(OSLO_ERR_OUT_OF_MEMORY, "inspect: %llu bytes", len + 1ULL);
    return NULL;
  }
  if (!oslo_bind_check(oslo_checkpoint_inspect(path, json, buf, len + 1, &len))) {
    free(buf);
    return NULL;
  }
  return buf;
}
%}
