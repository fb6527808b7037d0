# The files of the SWIG interface (bindings/oslo.i and every file it
# %includes, directly or through a language's part), as absolute paths: the
# dependencies of each language's SWIG command, so that editing any of them
# runs SWIG again. Included by cmake/OsloPythonExtension.cmake (the in-tree
# build and the stand-alone project pip builds), bindings/java and
# bindings/go. tests/bindings/swig_files_listed.sh checks these lists
# against the %include lines of the files.
#
#   OSLO_SWIG_INTERFACE         bindings/oslo.i, what SWIG is run on
#   OSLO_SWIG_INTERFACE_COMMON  it and the files every language reads
#   OSLO_SWIG_INTERFACE_PYTHON  the common files and Python's part
#   OSLO_SWIG_INTERFACE_JAVA    the common files and Java's part
#   OSLO_SWIG_INTERFACE_GO      the common files and Go's part
get_filename_component(_oslo_swig_dir ${CMAKE_CURRENT_LIST_DIR}/../bindings ABSOLUTE)
set(OSLO_SWIG_INTERFACE ${_oslo_swig_dir}/oslo.i)
set(OSLO_SWIG_INTERFACE_COMMON "")
foreach(f oslo.i chat_template.i engine.i library.i tensor.i layers.i model.i train.i tokenizer.i)
  list(APPEND OSLO_SWIG_INTERFACE_COMMON ${_oslo_swig_dir}/${f})
endforeach()
set(OSLO_SWIG_INTERFACE_PYTHON ${OSLO_SWIG_INTERFACE_COMMON})
foreach(f oslo_python.i oslo_python_extend.i)
  list(APPEND OSLO_SWIG_INTERFACE_PYTHON ${_oslo_swig_dir}/python/${f})
endforeach()
set(OSLO_SWIG_INTERFACE_JAVA ${OSLO_SWIG_INTERFACE_COMMON})
foreach(f oslo_java.i oslo_java_tensor.i oslo_java_layers.i oslo_java_model.i oslo_java_train.i
          oslo_java_tokenizer.i oslo_java_engine.i)
  list(APPEND OSLO_SWIG_INTERFACE_JAVA ${_oslo_swig_dir}/java/${f})
endforeach()
set(OSLO_SWIG_INTERFACE_GO ${OSLO_SWIG_INTERFACE_COMMON} ${_oslo_swig_dir}/go/oslo_go.i)
