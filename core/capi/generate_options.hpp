// oslo_generate_options as generate()'s options: shared by
// oslo_model_generate and the serving engine's requests.
#pragma once

#include "core/generate/generate.hpp"
#include "core/model/config.hpp"
#include "oslo.h"

namespace oslo {
namespace capi {

// The caller's options (NULL: the defaults) with the model config's EOS and
// pad ids where they ask for them. Throws oslo::Error
// (OSLO_ERR_INVALID_ARGUMENT) naming `fn` and the field for values the C
// struct cannot express (a bad early_stopping, too many EOS ids); the rest
// is checked by validate_options.
GenerateOptions read_generate_options(const oslo_generate_options* given, const ModelConfig& c,
                                      const char* fn);

}  // namespace capi
}  // namespace oslo
