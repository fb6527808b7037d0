#include "core/train/train_checkpoint.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/manifest.hpp"
#include "core/checkpoint/model_checkpoint.hpp"
#include "core/checkpoint/weight_source.hpp"
#include "core/common/error.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

namespace {

std::string names_str(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s + "]";
}

// The masters of every parameter under the model's placements, then each
// parameter's optimizer state under "optimizer/<state>/<name>" with the
// parameter's placement (the state has the parameter's local shape).
//
// A ZeRO optimizer holds only this data rank's part of each: the tensors
// are then whole local copies (`whole`), which gather_whole fills from
// every data rank before a save and scatter_whole takes this rank's part
// of after a load, so that the checkpoint is the same whatever the stage
// and the data-parallel size (written once: by data rank 0).
struct TrainingTensors {
  std::vector<PlacedTensor> list;
  std::vector<Tensor> whole;  // ZeRO: masters, then state k of every parameter
};

TrainingTensors training_tensors(Trainer& trainer) {
  Optimizer& opt = trainer.optimizer();
  Model& model = trainer.model();
  const std::vector<PlacedTensor>& params = model.tensors();
  const size_t np = params.size(), ns = opt.state_names().size();
  TrainingTensors t;
  auto tensor = [&](size_t k, size_t i) -> Tensor {  // k 0: master, k > 0: state k - 1
    if (!opt.partitioned()) return k == 0 ? opt.master(i) : opt.state(i)[k - 1];
    return t.whole[k * np + i];
  };
  if (opt.partitioned())
    for (size_t k = 0; k <= ns; ++k)
      for (size_t i = 0; i < np; ++i)
        t.whole.push_back(
            scratch(model.context().backend_ptr(), OSLO_DTYPE_F32, params[i].tensor.shape()));
  for (size_t i = 0; i < np; ++i) t.list.push_back({params[i].placement, tensor(0, i)});
  for (size_t k = 0; k < ns; ++k)
    for (size_t i = 0; i < np; ++i) {
      PlacedTensor p{params[i].placement, tensor(k + 1, i)};
      p.placement.name = optimizer_tensor_name(opt.state_names()[k], params[i].placement.name);
      t.list.push_back(std::move(p));
    }
  return t;
}

View flat(const Tensor& t) {
  return make_view(t.data(), t.dtype(), {t.numel()});
}

void gather_whole(Trainer& trainer, TrainingTensors& t) {
  Optimizer& opt = trainer.optimizer();
  const size_t np = trainer.model().tensors().size(), ns = opt.state_names().size();
  for (size_t k = 0; k <= ns; ++k) {
    std::vector<View> parts, out;
    for (size_t i = 0; i < np; ++i) {
      parts.push_back(k == 0 ? opt.master_view(i) : flat(opt.state(i)[k - 1]));
      out.push_back(flat(t.whole[k * np + i]));
    }
    trainer.data_parallel()->gather(parts, out);
  }
}

void scatter_whole(Trainer& trainer, const TrainingTensors& t) {
  Optimizer& opt = trainer.optimizer();
  Model& model = trainer.model();
  Backend& be = model.context().backend();
  const auto& params = model.tensors();
  const size_t np = params.size(), ns = opt.state_names().size();
  for (size_t i = 0; i < np; ++i) {
    const auto r = opt.owned(i);
    const int64_t n = r.second - r.first;
    auto part = [&](const Tensor& whole) {
      return make_view(static_cast<char*>(whole.data()) + r.first * 4, OSLO_DTYPE_F32, {n});
    };
    // Every parameter whole (rounded to its dtype), its master's part, and
    // the state's part.
    if (params[i].tensor.data())  // ZeRO-3 partitioned parameters have none
      be.convert(flat(params[i].tensor), flat(t.whole[i]));
    if (n == 0) continue;
    be.convert(opt.master_view(i), part(t.whole[i]));
    for (size_t k = 0; k < ns; ++k)
      be.convert(flat(opt.state(i)[k]), part(t.whole[(k + 1) * np + i]));
  }
}

// Every parameter name of the model, over all pipeline stages (each stage
// holds only its own; a tied head's copy on the last stage is named once),
// in stage order. Collective over the pipeline group.
std::vector<std::string> all_parameter_names(Model& model) {
  std::string mine;
  for (const PlacedTensor& p : model.tensors()) mine += p.placement.name + '\n';
  // Host strings: the pipeline group's control messages.
  const std::vector<std::string> texts =
      model.context().control(OSLO_GROUP_PIPELINE).all_gather_strings(mine);
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const std::string& t : texts) {
    size_t at = 0;
    for (size_t nl; (nl = t.find('\n', at)) != std::string::npos; at = nl + 1) {
      std::string name = t.substr(at, nl - at);
      if (seen.insert(name).second) names.push_back(std::move(name));
    }
  }
  return names;
}

}  // namespace

void save_training_checkpoint(const std::string& dir, Trainer& trainer,
                              const nlohmann::json& user_state) {
  Model& model = trainer.model();
  Context& ctx = model.context();
  Control& world = ctx.control(OSLO_GROUP_WORLD);
  nlohmann::json section;
  std::vector<PlacedTensor> tensors;
  const std::vector<std::string> names = all_parameter_names(model);
  // Everything a rank can refuse is agreed on before a byte is written.
  run_agreed(world, "training checkpoint save to " + quote_path(dir), [&] {
    OSLO_CHECK(!dir.empty(), OSLO_ERR_INVALID_ARGUMENT, "checkpoint directory is empty");
    TrainingSection t;
    t.trainer = trainer.state();  // refuses micro-batches accumulated since the last update
    t.state_names = trainer.optimizer().state_names();
    t.parameters = names;
    try {
      (void)user_state.dump();
    } catch (const nlohmann::json::exception& e) {
      fail(OSLO_ERR_INVALID_ARGUMENT,
           "training checkpoint: user_state cannot be written: ", clip(e.what(), 200));
    }
    t.user_state = user_state;
    section = training_section_json(t);
  });
  TrainingTensors tt = training_tensors(trainer);
  if (trainer.optimizer().partitioned()) gather_whole(trainer, tt);
  tensors = std::move(tt.list);
  const Topology& topo = ctx.topology();
  const CheckpointLayout layout = layout_of(topo);
  save_placed(dir, tensors, model.config().json_text, model.extra_files(), layout, world, {},
              {{kTrainingSection, section}});
}

nlohmann::json load_training_checkpoint(const std::string& dir, Trainer& trainer) {
  Model& model = trainer.model();
  Context& ctx = model.context();
  Control& world = ctx.control(OSLO_GROUP_WORLD);
  Optimizer& opt = trainer.optimizer();
  const std::string what = "training checkpoint load from " + quote_path(dir);
  std::unique_ptr<WeightSource> src;
  TrainingSection t;
  // First every rank checks what it is given, and all agree, ...
  run_agreed(world, what, [&] {
    struct stat sb;
    OSLO_CHECK(!dir.empty() && ::stat(dir.c_str(), &sb) == 0, OSLO_ERR_IO, quote_path(dir),
               " does not exist");
    OSLO_CHECK(S_ISDIR(sb.st_mode) && fsutil::exists(fsutil::join(dir, kCheckpointManifest)),
               OSLO_ERR_FORMAT, quote_path(dir), " is not a training checkpoint (no ",
               kCheckpointManifest,
               ": a Hugging Face folder or no checkpoint; load weights with Model::load)");
    src = std::make_unique<WeightSource>(dir);  // validates the manifest and the section
    OSLO_CHECK(src->training(&t), OSLO_ERR_FORMAT, quote_path(dir),
               " is not a training checkpoint (a model checkpoint without a training section: "
               "load it with Model::load and start a new optimizer)");
    OSLO_CHECK(t.state_names == opt.state_names(), OSLO_ERR_INVALID_ARGUMENT,
               "training checkpoint ", quote_path(dir), " was saved by optimizer ",
               t.trainer["optimizer"].get<std::string>(), " with state ", names_str(t.state_names),
               "; this trainer's optimizer keeps ", names_str(opt.state_names()));
  });
  // ... then loads. load_placed checks every name, global shape and dtype
  // before it writes a byte, and re-slices to this tensor-parallel size.
  run_agreed(world, what, [&] {
    TrainingTensors tt = training_tensors(trainer);
    load_placed(*src, tt.list, ctx.backend());
    src->release();
    if (opt.partitioned()) {
      scatter_whole(trainer, tt);
      model.parameters_changed();
    } else {
      opt.masters_loaded();
    }
    trainer.set_state(t.trainer);
  });
  return t.user_state;
}

}  // namespace oslo
