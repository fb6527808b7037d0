# oslo_python_extension(TARGET PKG_DIR OSLO_INCLUDE_DIR OSLO_TARGET)
#
# The Python extension oslo._capi: SWIG generates capi_wrap.c and capi.py
# from bindings/oslo.i (which includes its Python part, bindings/python/
# oslo_python*.i, and OSLO_INCLUDE_DIR/oslo.h), the wrapper
# is compiled into PKG_DIR/_capi.<soabi>.so linked against OSLO_TARGET, and
# the pure-Python files of bindings/python/oslo are copied next to it. Used
# by the in-tree build (bindings/CMakeLists.txt) and by the stand-alone
# project pip builds (bindings/python/CMakeLists.txt). Needs SWIG_EXECUTABLE
# and Python3 (Development.Module) found by the caller.
#
# OSLO_PYTHON_PACKAGE_FILES: the files of the package besides the extension
# (bindings/python/oslo and SWIG's capi.py), by name, for whatever installs
# the package (bindings/python/CMakeLists.txt, cmake/OsloWheel.cmake).
set(_oslo_bindings_dir ${CMAKE_CURRENT_LIST_DIR}/../bindings)
include(${CMAKE_CURRENT_LIST_DIR}/OsloSwigInterface.cmake)
set(_oslo_python_sources __init__.py __main__.py _chat.py _errors.py _handle.py _enums.py
    _tensor.py _layers.py _inputs.py _model.py _train.py _tokenizer.py serve.py __init__.pyi
    py.typed)
set(OSLO_PYTHON_PACKAGE_FILES capi.py ${_oslo_python_sources}
    CACHE INTERNAL "the files of the Python package besides the extension")
function(oslo_python_extension target pkg_dir oslo_include_dir oslo_target)
  set(wrap ${CMAKE_CURRENT_BINARY_DIR}/capi_wrap.c)
  # -DSWIGWORDSIZE64: int64_t is long on LP64 Linux (SWIG's stdint.i assumes
  # long long otherwise, and the generated casts would not match oslo.h).
  set(defs "")
  if(CMAKE_SIZEOF_VOID_P EQUAL 8 AND NOT WIN32)
    set(defs -DSWIGWORDSIZE64)
  endif()
  add_custom_command(
    OUTPUT ${wrap} ${pkg_dir}/capi.py
    COMMAND ${CMAKE_COMMAND} -E make_directory ${pkg_dir}
    COMMAND ${SWIG_EXECUTABLE} -python -Wall ${defs} -I${oslo_include_dir} -outdir ${pkg_dir}
            -o ${wrap} ${OSLO_SWIG_INTERFACE}
    DEPENDS ${OSLO_SWIG_INTERFACE_PYTHON} ${oslo_include_dir}/oslo.h
    COMMENT "SWIG: bindings/oslo.i -> Python"
    VERBATIM)
  Python3_add_library(${target} MODULE WITH_SOABI ${wrap})
  # C11 for _Thread_local (the per-thread status of oslo.i).
  set_target_properties(${target} PROPERTIES OUTPUT_NAME _capi LIBRARY_OUTPUT_DIRECTORY ${pkg_dir}
                        C_STANDARD 11 C_VISIBILITY_PRESET hidden)
  target_link_libraries(${target} PRIVATE ${oslo_target})
  # The generated file only: SWIG's wrapper functions take a `self` they do
  # not always use; every other warning of -Wall -Wextra stays on.
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  # The pure-Python layer and its type stubs next to the extension.
  foreach(f ${_oslo_python_sources})
    configure_file(${_oslo_bindings_dir}/python/oslo/${f} ${pkg_dir}/${f} COPYONLY)
  endforeach()
endfunction()
