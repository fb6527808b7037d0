#include "core/train/train_checkpoint.hpp"

#include <sys/stat.h>

#include <map>
#include <memory>
#include <vector>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/manifest.hpp"
#include "core/checkpoint/model_checkpoint.hpp"
#include "core/checkpoint/weight_source.hpp"
#include "core/common/error.hpp"

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
std::vector<PlacedTensor> training_tensors(Trainer& trainer) {
  Optimizer& opt = trainer.optimizer();
  const std::vector<PlacedTensor>& params = trainer.model().tensors();
  std::vector<PlacedTensor> out;
  for (size_t i = 0; i < params.size(); ++i) out.push_back({params[i].placement, opt.master(i)});
  for (size_t k = 0; k < opt.state_names().size(); ++k)
    for (size_t i = 0; i < params.size(); ++i) {
      PlacedTensor t{params[i].placement, opt.state(i)[k]};
      t.placement.name = optimizer_tensor_name(opt.state_names()[k], params[i].placement.name);
      out.push_back(std::move(t));
    }
  return out;
}

}  // namespace

void save_training_checkpoint(const std::string& dir, Trainer& trainer,
                              const nlohmann::json& user_state) {
  Model& model = trainer.model();
  Context& ctx = model.context();
  Communicator& world = ctx.comm(OSLO_GROUP_WORLD);
  nlohmann::json section;
  std::vector<PlacedTensor> tensors;
  // Everything a rank can refuse is agreed on before a byte is written.
  run_agreed(world, "training checkpoint save to " + quote_path(dir), [&] {
    OSLO_CHECK(!dir.empty(), OSLO_ERR_INVALID_ARGUMENT, "checkpoint directory is empty");
    TrainingSection t;
    t.trainer = trainer.state();  // refuses micro-batches accumulated since the last update
    t.state_names = trainer.optimizer().state_names();
    for (const PlacedTensor& p : model.tensors()) t.parameters.push_back(p.placement.name);
    try {
      (void)user_state.dump();
    } catch (const nlohmann::json::exception& e) {
      fail(OSLO_ERR_INVALID_ARGUMENT,
           "training checkpoint: user_state cannot be written: ", clip(e.what(), 200));
    }
    t.user_state = user_state;
    section = training_section_json(t);
    tensors = training_tensors(trainer);
  });
  const Topology& topo = ctx.topology();
  const CheckpointLayout layout = layout_of(topo);
  save_placed(dir, tensors, model.config().json_text, model.extra_files(), layout, world, {},
              {{kTrainingSection, section}});
}

nlohmann::json load_training_checkpoint(const std::string& dir, Trainer& trainer) {
  Model& model = trainer.model();
  Context& ctx = model.context();
  Communicator& world = ctx.comm(OSLO_GROUP_WORLD);
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
    std::vector<PlacedTensor> tensors = training_tensors(trainer);
    load_placed(*src, tensors, ctx.backend());
    src->release();
    opt.masters_loaded();
    trainer.set_state(t.trainer);
  });
  return t.user_state;
}

}  // namespace oslo
