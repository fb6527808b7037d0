// The folder liboslo itself was loaded from, for finding the shared
// libraries it loads at run time (backend plugins, the SentencePiece shim).
#pragma once

#include <string>

namespace oslo {

// The folder of the file holding liboslo's code (liboslo.so, or the program
// for a static link), without a trailing '/'; "" if unknown.
std::string own_directory();

}  // namespace oslo
