# Finds oneDNN by its header and library and defines the imported target
# oslo::dnnl.
#
# Debian's dnnl-config.cmake is not used: its package was built with the OpenCL
# GPU runtime, so it calls find_package(OpenCL REQUIRED) and fails unless the
# OpenCL development files (ocl-icd-opencl-dev, only *recommended* by
# libdnnl-dev) happen to be installed. oslo uses oneDNN's CPU engine only and
# needs neither OpenCL headers nor OpenCL::OpenCL at link time (libdnnl.so's own
# dependency on libOpenCL.so.1 is resolved by the loader).
if(TARGET oslo::dnnl)
  return()
endif()
find_path(OSLO_DNNL_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.hpp dnnl.hpp
          DOC "Folder holding oneDNN's headers")
find_library(OSLO_DNNL_LIBRARY NAMES dnnl DOC "oneDNN's library")
if(NOT OSLO_DNNL_INCLUDE_DIR OR NOT OSLO_DNNL_LIBRARY)
  message(FATAL_ERROR
    "oneDNN was not found (header oneapi/dnnl/dnnl.hpp: ${OSLO_DNNL_INCLUDE_DIR}; "
    "library: ${OSLO_DNNL_LIBRARY}). On Debian: apt-get install libdnnl-dev "
    "(bash tools/deps.sh does); elsewhere set CMAKE_PREFIX_PATH to oneDNN's prefix.")
endif()
add_library(oslo::dnnl UNKNOWN IMPORTED)
set_target_properties(oslo::dnnl PROPERTIES
  IMPORTED_LOCATION "${OSLO_DNNL_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${OSLO_DNNL_INCLUDE_DIR}")
message(STATUS "oneDNN: ${OSLO_DNNL_LIBRARY}")
