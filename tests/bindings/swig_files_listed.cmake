# cmake -P swig_files_listed.cmake: every file of bindings/ that
# bindings/oslo.i %includes, directly or through another, is a dependency
# of the SWIG command of each language that reads it
# (cmake/OsloSwigInterface.cmake: the common files in
# OSLO_SWIG_INTERFACE_COMMON, python/ in _PYTHON, java/ in _JAVA, go/ in
# _GO), and every file listed exists. A file added to the interface but not
# to those lists would not run SWIG again when edited: this fails.
cmake_minimum_required(VERSION 3.20)
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/OsloSwigInterface.cmake)
get_filename_component(dir ${OSLO_SWIG_INTERFACE} DIRECTORY)
set(found ${OSLO_SWIG_INTERFACE})
set(todo ${OSLO_SWIG_INTERFACE})
while(todo)
  list(POP_FRONT todo f)
  file(STRINGS ${f} lines REGEX "^[ \t]*%include[ \t]*\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*%include[ \t]*\"([^\"]*)\".*" "\\1" inc "${line}")
    # SWIG's library ("stdint.i") and oslo.h are not in bindings/.
    if(EXISTS ${dir}/${inc} AND NOT ${dir}/${inc} IN_LIST found)
      list(APPEND found ${dir}/${inc})
      list(APPEND todo ${dir}/${inc})
    endif()
  endforeach()
endwhile()
set(bad 0)
foreach(f IN LISTS found)
  file(RELATIVE_PATH rel ${dir} ${f})
  set(lists COMMON)
  if(rel MATCHES "^python/")
    set(lists PYTHON)
  elseif(rel MATCHES "^java/")
    set(lists JAVA)
  elseif(rel MATCHES "^go/")
    set(lists GO)
  endif()
  if(NOT f IN_LIST OSLO_SWIG_INTERFACE_${lists})
    message("bindings/${rel} is included by the interface but not in OSLO_SWIG_INTERFACE_${lists} "
            "(cmake/OsloSwigInterface.cmake)")
    math(EXPR bad "${bad} + 1")
  endif()
endforeach()
foreach(f IN LISTS OSLO_SWIG_INTERFACE_PYTHON OSLO_SWIG_INTERFACE_JAVA OSLO_SWIG_INTERFACE_GO)
  if(NOT f IN_LIST found)
    message("${f} is listed in cmake/OsloSwigInterface.cmake but not included by the interface")
    math(EXPR bad "${bad} + 1")
  endif()
endforeach()
list(LENGTH found n)
message("${n} interface files included, ${bad} not listed or not included")
if(bad GREATER 0 OR n LESS 10)
  message(FATAL_ERROR "the SWIG dependencies of cmake/OsloSwigInterface.cmake are not the "
                      "interface's files")
endif()
