# The Go module as a module proxy serves it (GOPROXY's file layout), made at
# build time by bindings/go/CMakeLists.txt and installed with the dev
# component (liboslo-dev) under <prefix>/share/oslo/go-proxy:
#
#   cmake -DMODULE_DIR=<dir> -DMODULE=<path> -DVERSION=<x.y.z> -DTIME=<RFC 3339>
#         -DOUT=<proxy root> -P OsloGoProxy.cmake
#
# writes <OUT>/<MODULE>/@v/list ("v<VERSION>"), v<VERSION>.info
# ({"Version":...,"Time":...}), v<VERSION>.mod (the module's go.mod) and
# v<VERSION>.zip: the module's files under "<MODULE>@v<VERSION>/" (file
# entries only, as `go mod download` requires), taken from MODULE_DIR (the
# build tree's copy of bindings/go, with the SWIG-generated capi.go and
# capi_wrap.c, so that a user needs no SWIG): go.mod, the package oslo and
# oslo/internal/capi. The tests (they read fixtures from a checkout), the
# examples and benchmark copied there for the build, and the SWIG interface
# part are left out. With
#
#   GOPROXY=file://<prefix>/share/oslo/go-proxy GONOSUMDB=<MODULE> GOFLAGS=-mod=mod
#
# `go get <MODULE>@v<VERSION>` works without a replace directive.
cmake_minimum_required(VERSION 3.21)
foreach(v MODULE_DIR MODULE VERSION TIME OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "OsloGoProxy.cmake: -D${v}= is required")
  endif()
endforeach()
if(MODULE MATCHES "[A-Z]")
  message(FATAL_ERROR "OsloGoProxy.cmake: ${MODULE} has upper-case letters (the proxy path "
                      "would need Go's !-escaping)")
endif()
set(_v "v${VERSION}")
set(_at "${OUT}/${MODULE}/@v")
set(_stage "${OUT}.stage")
set(_top "${MODULE}@${_v}")
file(REMOVE_RECURSE "${_stage}" "${OUT}")
file(GLOB_RECURSE _files RELATIVE "${MODULE_DIR}" "${MODULE_DIR}/oslo/*.go"
     "${MODULE_DIR}/oslo/*.c")
list(FILTER _files EXCLUDE REGEX "_test\\.go$")
list(APPEND _files go.mod)
list(SORT _files)
foreach(f ${_files} oslo/internal/capi/capi.go oslo/internal/capi/capi_wrap.c)
  if(NOT EXISTS "${MODULE_DIR}/${f}")
    message(FATAL_ERROR "OsloGoProxy.cmake: ${MODULE_DIR}/${f} is missing")
  endif()
endforeach()
set(_entries "")
foreach(f ${_files})
  get_filename_component(_d "${_stage}/${_top}/${f}" DIRECTORY)
  file(MAKE_DIRECTORY "${_d}")
  file(COPY_FILE "${MODULE_DIR}/${f}" "${_stage}/${_top}/${f}")
  list(APPEND _entries "${_top}/${f}")
endforeach()
file(MAKE_DIRECTORY "${_at}")
# Only the files are named: a directory entry (github.com/, ...) outside
# the <MODULE>@<version>/ prefix would make Go refuse the zip.
string(REPLACE "T" " " _mtime "${TIME}")
string(REPLACE "Z" " UTC" _mtime "${_mtime}")
execute_process(COMMAND ${CMAKE_COMMAND} -E tar cf "${_at}/${_v}.zip" --format=zip
                        "--mtime=${_mtime}" -- ${_entries}
                WORKING_DIRECTORY "${_stage}" RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "OsloGoProxy.cmake: zipping the module failed")
endif()
file(REMOVE_RECURSE "${_stage}")
file(COPY_FILE "${MODULE_DIR}/go.mod" "${_at}/${_v}.mod")
file(WRITE "${_at}/${_v}.info" "{\"Version\":\"${_v}\",\"Time\":\"${TIME}\"}\n")
file(WRITE "${_at}/list" "${_v}\n")
