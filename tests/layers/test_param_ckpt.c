/*
 * rank_test ckpt-save / ckpt-load / ckpt-load-bad: a parameter set of
 * parallel layers saved at one tensor-parallel size and loaded at another
 * (test_ckpt_reshard.sh), and a corrupt shard failing on every rank
 * (test_ckpt_corrupt.sh).
 */
#include "rank_test.h"

/* ------------------------------------------------------------------------ */
/* Checkpoints: save at one TP size, load at another                          */
/* ------------------------------------------------------------------------ */

enum { CK_IN = 12, CK_OUT = 12, CK_VOCAB = 13, CK_H = 4, CK_REP = 6 };

static void ckpt_full(float *col_w, float *col_b, float *row_w, float *row_b, float *emb,
                      float *rep) {
  th_fill(col_w, CK_OUT * CK_IN, 51);
  th_fill(col_b, CK_OUT, 52);
  th_fill(row_w, CK_OUT * CK_IN, 53);
  th_fill(row_b, CK_OUT, 54);
  th_fill(emb, CK_VOCAB * CK_H, 55);
  th_fill(rep, CK_REP, 56);
}

/* A load that fails on one rank fails on all, with the same status, and
 * every rank's message names the rank that failed. */
static void check_load_fails_everywhere(th_state *s, oslo_context *ctx, oslo_param_set *ps,
                                        const char *dir, int bad_rank) {
  oslo_status st = oslo_param_set_load_checkpoint(ps, dir);
  char msg[1024], want[64];
  snprintf(msg, sizeof msg, "%s", oslo_last_error());
  snprintf(want, sizeof want, "failed on world rank %d", bad_rank);
  TH_CHECK(s, st == OSLO_ERR_FORMAT, "load of a corrupt checkpoint gave %s (%s)",
           oslo_status_string(st), msg);
  TH_CHECK(s, strstr(msg, want) != NULL, "message does not say \"%s\": %s", want, msg);
  int world = 0;
  TH_OK(s, oslo_context_size(ctx, OSLO_GROUP_WORLD, &world));
  int32_t mine = (int32_t)st, all[64];
  oslo_tensor *in = mk(s, ctx, OSLO_DTYPE_I32, 1, 1, 0, 0, &mine);
  oslo_tensor *out = mk(s, ctx, OSLO_DTYPE_I32, 1, world, 0, 0, NULL);
  TH_OK(s, oslo_context_all_gather(ctx, OSLO_GROUP_WORLD, in, out));
  TH_OK(s, oslo_tensor_copy_to_host(out, all, (size_t)world * 4));
  for (int r = 0; r < world && r < 64; ++r)
    TH_CHECK(s, all[r] == mine, "rank %d got %s but this rank got %s", r,
             oslo_status_string((oslo_status)all[r]), oslo_status_string(st));
  oslo_tensor_destroy(in);
  oslo_tensor_destroy(out);
}

void run_ckpt(th_state *s, oslo_context *ctx, int tp, int tr, const char *dir, int save,
              int bad_rank) {
  float cw[CK_OUT * CK_IN], cb[CK_OUT], rw[CK_OUT * CK_IN], rb[CK_OUT], ew[CK_VOCAB * CK_H],
      rep[CK_REP];
  ckpt_full(cw, cb, rw, rb, ew, rep);
  oslo_parallel_linear_options oc, orw;
  oslo_parallel_linear_options_init(&oc, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  oslo_parallel_linear_options_init(&orw, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  oc.kind = OSLO_LINEAR_COLUMN;
  oc.in_features = CK_IN;
  oc.out_features = CK_OUT;
  orw.kind = OSLO_LINEAR_ROW;
  orw.in_features = CK_IN;
  orw.out_features = CK_OUT;
  oslo_parallel_linear *col = NULL, *row = NULL;
  oslo_parallel_embedding *emb = NULL;
  TH_OK(s, oslo_parallel_linear_create(ctx, &oc, &col));
  TH_OK(s, oslo_parallel_linear_create(ctx, &orw, &row));
  oslo_parallel_embedding_options eo;
  oslo_parallel_embedding_options_init(&eo, OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION);
  eo.vocab_size = CK_VOCAB;
  eo.hidden_size = CK_H;
  TH_OK(s, oslo_parallel_embedding_create(ctx, &eo, &emb));
  oslo_tensor *trep = mk(s, ctx, OSLO_DTYPE_F32, 1, CK_REP, 0, 0, save ? rep : NULL);
  if (save) {
    oslo_tensor *a = mk(s, ctx, OSLO_DTYPE_F32, 2, CK_OUT, CK_IN, 0, cw),
                *b = mk(s, ctx, OSLO_DTYPE_F32, 1, CK_OUT, 0, 0, cb);
    TH_OK(s, oslo_parallel_linear_load_full(col, a, b));
    TH_OK(s, oslo_tensor_copy_from_host(a, rw, sizeof rw));
    TH_OK(s, oslo_tensor_copy_from_host(b, rb, sizeof rb));
    TH_OK(s, oslo_parallel_linear_load_full(row, a, b));
    oslo_tensor *e = mk(s, ctx, OSLO_DTYPE_F32, 2, CK_VOCAB, CK_H, 0, ew);
    TH_OK(s, oslo_parallel_embedding_load_full(emb, e));
    oslo_tensor_destroy(a);
    oslo_tensor_destroy(b);
    oslo_tensor_destroy(e);
  }
  oslo_param_set *ps = NULL;
  TH_OK(s, oslo_param_set_create(ctx, &ps));
  TH_OK(s, oslo_param_set_add_linear(ps, "col", col));
  TH_OK(s, oslo_param_set_add_linear(ps, "row", row));
  TH_OK(s, oslo_param_set_add_embedding(ps, "emb", emb));
  TH_OK(s, oslo_param_set_add(ps, "rep", trep, NULL, -1));
  oslo_status dup = oslo_param_set_add(ps, "rep", trep, NULL, -1);
  TH_CHECK(s, dup == OSLO_ERR_INVALID_ARGUMENT, "duplicate name gave %s", oslo_status_string(dup));
  size_t count = 0;
  TH_OK(s, oslo_param_set_count(ps, &count));
  TH_CHECK(s, count == 6, "param count %zu", count);
  if (save) {
    TH_OK(s, oslo_param_set_save_checkpoint(ps, dir));
  } else if (bad_rank >= 0) {
    check_load_fails_everywhere(s, ctx, ps, dir, bad_rank);
  } else {
    TH_OK(s, oslo_param_set_load_checkpoint(ps, dir));
    const int ol = CK_OUT / tp, il = CK_IN / tp, per = (CK_VOCAB + tp - 1) / tp;
    oslo_tensor *w = NULL, *b = NULL;
    float got[CK_OUT * CK_IN + 64];
    TH_OK(s, oslo_parallel_linear_params(col, &w, &b, NULL, NULL));
    get_f32(s, got, ol * CK_IN, w);
    TH_CHECK(s, memcmp(got, cw + tr * ol * CK_IN, ol * CK_IN * 4) == 0, "column weight after load");
    get_f32(s, got, ol, b);
    TH_CHECK(s, memcmp(got, cb + tr * ol, ol * 4) == 0, "column bias after load");
    TH_OK(s, oslo_parallel_linear_params(row, &w, &b, NULL, NULL));
    get_f32(s, got, CK_OUT * il, w);
    float want[CK_OUT * CK_IN];
    slice_cols_f(want, rw, CK_OUT, CK_IN, tr * il, il);
    TH_CHECK(s, memcmp(got, want, CK_OUT * il * 4) == 0, "row weight after load");
    get_f32(s, got, CK_OUT, b);
    TH_CHECK(s, memcmp(got, rb, sizeof rb) == 0, "row bias after load");
    oslo_tensor *e = NULL;
    TH_OK(s, oslo_parallel_embedding_params(emb, &e, NULL));
    get_f32(s, got, per * CK_H, e);
    int ok = 1;
    for (int r = 0; r < per; ++r)
      for (int h = 0; h < CK_H; ++h) {
        int v = tr * per + r;
        float expect = v < CK_VOCAB ? ew[v * CK_H + h] : 0.f;
        ok &= got[r * CK_H + h] == expect;
      }
    TH_CHECK(s, ok, "embedding after load (padding rows zero)");
    get_f32(s, got, CK_REP, trep);
    TH_CHECK(s, memcmp(got, rep, sizeof rep) == 0, "replicated tensor after load");
  }
  oslo_param_set_destroy(ps);
  oslo_tensor_destroy(trep);
  oslo_parallel_linear_destroy(col);
  oslo_parallel_linear_destroy(row);
  oslo_parallel_embedding_destroy(emb);
}
