// Definitions of the opaque handles of oslo.h and the guard every C entry
// point runs its body in: it catches every exception and turns it into a
// status and the thread-local last-error message, so nothing throws across
// the ABI.
//
// Lifetimes: a handle keeps alive what its object was made from, so the
// *_destroy functions may run in any order (include/oslo.h, "Lifetimes").
// A context's oslo::Context and a model's oslo::Model are shared: the
// context handle, and every model, layer and parameter set made from it,
// hold the Context; the model handle and every optimizer made over it hold
// the Model (which holds its Context). The object is freed with the last
// handle that holds it, the dependant's own object first (member order
// below: the owner reference is declared before the object that uses it, so
// it is released after it).
#pragma once

#include <memory>
#include <new>
#include <string>

#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/layers/embedding.hpp"
#include "core/layers/linear.hpp"
#include "core/layers/param_set.hpp"
#include "core/model/model.hpp"
#include "core/tensor/tensor.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "core/train/trainer.hpp"
#include "oslo.h"

struct oslo_context {
  std::shared_ptr<oslo::Context> impl;  // shared with its models, layers and parameter sets
};

struct oslo_tensor {
  oslo::Tensor t;
  oslo_context* ctx = nullptr;
};

struct oslo_parallel_linear {
  std::shared_ptr<oslo::Context> ctx;  // kept alive: impl uses it (released after impl)
  std::unique_ptr<oslo::ParallelLinear> impl;
  oslo_tensor weight, bias, grad_weight, grad_bias;  // borrowed views of impl's tensors
};

struct oslo_parallel_embedding {
  std::shared_ptr<oslo::Context> ctx;  // kept alive: impl uses it (released after impl)
  std::unique_ptr<oslo::ParallelEmbedding> impl;
  oslo_tensor weight, grad_weight;
};

struct oslo_param_set {
  std::shared_ptr<oslo::Context> ctx;  // kept alive: impl uses it (released after impl)
  std::unique_ptr<oslo::ParamSet> impl;
};

struct oslo_model {
  // Shared with the optimizers made over it; holds its context
  // (oslo::capi::share_model).
  std::shared_ptr<oslo::Model> impl;
  // The pipeline schedule of the last oslo_model_train_step through this
  // handle (oslo_model_pipeline_stats; zeros when it ran none).
  oslo::PipelineStats last_pipeline;
};

struct oslo_tokenizer {
  std::shared_ptr<oslo::Tokenizer> impl;  // shared with the engines that decode with it
};

struct oslo_optimizer {
  // The model it was created over, kept alive after oslo_model_destroy:
  // ~Trainer writes into it (hooks, ZeRO-3's parameter sources). Released
  // after impl.
  std::shared_ptr<oslo::Model> model;
  std::unique_ptr<oslo::Trainer> impl;
};

namespace oslo {
namespace capi {

void set_last_error(const std::string& msg) noexcept;
const char* last_error_cstr() noexcept;

template <typename F>
oslo_status guard(F&& body) noexcept {
  try {
    body();
    return OSLO_OK;
  } catch (const Error& e) {
    set_last_error(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return OSLO_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return OSLO_ERR_INTERNAL;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return OSLO_ERR_INTERNAL;
  }
}

// A loaded model as the shared object its handle and optimizers hold: the
// last holder deletes the model, then releases the context it was loaded on
// (oslo::Model keeps a Context&).
inline std::shared_ptr<Model> share_model(std::unique_ptr<Model> model,
                                          std::shared_ptr<Context> ctx) {
  struct Deleter {
    std::shared_ptr<Context> ctx;
    void operator()(Model* m) noexcept {
      delete m;
      ctx.reset();
    }
  };
  return std::shared_ptr<Model>(model.release(), Deleter{std::move(ctx)});
}

// Argument checks that name the function and the argument.
inline void need(const void* p, const char* fn, const char* arg) {
  if (!p) fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": ", arg, " is NULL");
}
// ids (and mask, labels) arrays of batch * seq entries: ids present, sizes
// positive and at most 2^31 entries.
inline void check_batch(const char* fn, const int64_t* ids, int64_t batch, int64_t seq) {
  need(ids, fn, "ids");
  if (batch <= 0 || seq <= 0 || batch > (int64_t{1} << 31) / seq)
    fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": batch (", batch, ") and seq (", seq,
         ") must be positive and batch * seq at most 2^31");
}
inline const Tensor& tensor_of(const oslo_tensor* t, const char* fn, const char* arg) {
  need(t, fn, arg);
  return t->t;
}

}  // namespace capi
}  // namespace oslo
