# Debian packages of oslo: `cpack -G DEB` in the build folder writes one .deb
# per install component (docs/PACKAGING.md):
#
#   liboslo0               component lib: liboslo.so.0 and the SentencePiece
#                          shim it loads (the CPU backend is built into it)
#   liboslo-dev            component dev: oslo.h, oslo/dlpack.h, the
#                          liboslo.so link, oslo.pc and the CMake package
#   oslo-tools             component tools: the oslo and oslo-run commands
#   liboslo0-backend-<name> component <name>: one per backend plugin built
#                          (torch, cuda; oslo_add_backend)
#
# Runtime dependencies come from dpkg-shlibdeps (needs dpkg-dev and file);
# every package but liboslo0 depends on liboslo0 of exactly this version.
# Packages install under /usr: configure with -DCMAKE_INSTALL_PREFIX=/usr so
# that the library directory is Debian's multiarch one (lib/<triplet>).

set(CPACK_PACKAGE_NAME oslo)
set(CPACK_PACKAGE_VENDOR "oslo developers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(OSLO_DEB_MAINTAINER "oslo developers" CACHE STRING
    "Maintainer field of the Debian packages (Name <email>)")
set(OSLO_DEB_RELEASE 1 CACHE STRING "Debian revision of the packages (the -N of 0.3.0-N)")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${OSLO_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_RELEASE ${OSLO_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Libraries of the package itself (a plugin's NEEDED liboslo.so.0) are found
# in the build tree; their dependency is the explicit one on liboslo0.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "Debian packages (cpack -G DEB) install under /usr with the library in "
                 "/usr/${CMAKE_INSTALL_LIBDIR}; configure with -DCMAKE_INSTALL_PREFIX=/usr for "
                 "Debian's multiarch library directory")
endif()

set(CPACK_COMPONENTS_ALL lib dev tools)
set(CPACK_DEBIAN_LIB_PACKAGE_NAME liboslo0)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# The shlibs file other packages' dpkg-shlibdeps read (only liboslo.so.0 has
# a SONAME, so only liboslo0 gets one). While oslo is 0.x a minor release may
# change the ABI under the same SONAME (CHANGELOG.md), so a program built
# against this package needs this version exactly.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY "=")
set(CPACK_COMPONENT_LIB_DESCRIPTION
    "oslo: tensor-parallel transformer models behind a C ABI (library)
oslo runs Hugging Face transformer models (GPT-2, BERT, LLaMA, Mistral, Qwen2,
GPT-NeoX) split across ranks with tensor parallelism, from C, C++ and other
languages through a stable C ABI. This package holds the shared library
liboslo.so.0 with its built-in CPU backend and the SentencePiece tokenizer
shim it loads.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME liboslo-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS lib)
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "oslo: tensor-parallel transformer models behind a C ABI (development files)
The header oslo.h (with oslo/dlpack.h), the liboslo.so link, the pkg-config
file (pkg-config --cflags --libs oslo) and the CMake package
(find_package(oslo 0.3 REQUIRED), target oslo::oslo).")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME oslo-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION science)
set(CPACK_COMPONENT_TOOLS_DEPENDS lib)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
    "oslo: tensor-parallel transformer models behind a C ABI (commands)
The oslo command (generate, embed, train, merge, reshard and inspect models)
and oslo-run, the launcher that starts and supervises the ranks of one node
with a torchrun-compatible environment.")

# One package per backend plugin this build makes (oslo_add_backend in the
# plugin's folder, cmake/OsloAddBackend.cmake): liboslo0-backend-<name>.
get_property(_oslo_plugins GLOBAL PROPERTY OSLO_BACKEND_PLUGINS)
foreach(_p ${_oslo_plugins})
  string(TOUPPER "${_p}" _P)
  string(TOLOWER "${_p}" _deb)
  string(REPLACE "_" "-" _deb "${_deb}")
  list(APPEND CPACK_COMPONENTS_ALL ${_p})
  set(CPACK_DEBIAN_${_P}_PACKAGE_NAME liboslo0-backend-${_deb})
  set(CPACK_DEBIAN_${_P}_PACKAGE_SECTION libs)
  set(CPACK_COMPONENT_${_P}_DEPENDS lib)
  get_property(CPACK_COMPONENT_${_P}_DESCRIPTION GLOBAL PROPERTY OSLO_BACKEND_DESCRIPTION_${_p})
endforeach()

include(CPack)
