# The Python wheel's layout (OSLO_PYTHON_WHEEL, set by pyproject.toml):
# everything lands in the package folder oslo/ as the install component
# "wheel", the only one scikit-build-core installs (install.components):
#
#   oslo/__init__.py, capi.py, ...   the Python package (bindings/python/oslo)
#   oslo/_capi.<soabi>.so            the extension, NEEDED liboslo.so.0
#   oslo/liboslo.so.0                the library with its CPU backend
#   oslo/liboslo_sentencepiece.so    the shim liboslo dlopens from its own folder
#   oslo/oslo, oslo/oslo-run         the commands (python -m oslo, oslo-run)
#   oslo/liboslo_backend_*.so        the CUDA and torch plugins, when built
#
# RPATH $ORIGIN: the extension finds liboslo next to it wherever pip puts
# the package. The oslo command links liboslo's objects statically and finds
# the shim in its own folder too (core/common/own_dir.cpp). The libraries
# they need from the system (oneDNN, Gloo, PCRE2, utf8proc, SentencePiece,
# libgomp) are not copied here: `auditwheel repair` bundles them.
if(NOT OSLO_PYTHON_BUILT)
  message(FATAL_ERROR "OSLO_PYTHON_WHEEL needs the Python extension (SWIG 4 and the Python "
                      "headers; OSLO_BUILD_PYTHON must not be OFF)")
endif()
set(_oslo_wheel_targets oslo oslo_sentencepiece oslo_python oslo_cli oslo-run)
set_target_properties(${_oslo_wheel_targets} PROPERTIES INSTALL_RPATH "$ORIGIN")
# liboslo under its SONAME only: a wheel (a zip) has no symbolic links, so
# liboslo.so.0.3.0 and its links would be as many copies. install(FILES)
# does not rewrite the RUNPATH: liboslo is linked with the install one
# ($ORIGIN; its dependencies are the system's, in the build tree too).
set_target_properties(oslo PROPERTIES BUILD_WITH_INSTALL_RPATH ON)
install(FILES $<TARGET_FILE:oslo> DESTINATION oslo RENAME liboslo.so.0
        COMPONENT wheel)
install(TARGETS oslo_sentencepiece oslo_python LIBRARY DESTINATION oslo COMPONENT wheel)
install(TARGETS oslo_cli oslo-run RUNTIME DESTINATION oslo COMPONENT wheel)
# The backend plugins this build makes (oslo_add_backend; pip wheel . -C
# cmake.define.OSLO_BUILD_CUDA=ON or OSLO_BACKEND_TORCH=ON): next to liboslo,
# which looks for liboslo_backend_<name>.so in its own folder. They keep the
# RUNPATH of the libraries they link (INSTALL_RPATH_USE_LINK_PATH: the CUDA
# toolkit's, libtorch's), which stay outside the wheel: a machine running
# them has those libraries where the build found them (docs/PACKAGING.md).
get_property(_oslo_plugins GLOBAL PROPERTY OSLO_BACKEND_PLUGINS)
foreach(_p ${_oslo_plugins})
  install(TARGETS oslo_backend_${_p} LIBRARY DESTINATION oslo COMPONENT wheel)
endforeach()
# The package folder the extension was built into (bindings/CMakeLists.txt).
set(_pkg ${CMAKE_BINARY_DIR}/bindings/python/oslo)
# Its files (cmake/OsloPythonExtension.cmake).
list(TRANSFORM OSLO_PYTHON_PACKAGE_FILES PREPEND ${_pkg}/ OUTPUT_VARIABLE _oslo_py_files)
install(FILES ${_oslo_py_files} DESTINATION oslo COMPONENT wheel)
