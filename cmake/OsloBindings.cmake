# What the language bindings' CMakeLists share (bindings/ for Python,
# bindings/java, bindings/go, and their tests under tests/).

# oslo_binding_mode(<Name> <OPTION> <out>): sets <out> to AUTO, ON or OFF
# from the value of the cache option <OPTION> (1/TRUE/YES/Y count as ON,
# 0/FALSE/NO/N as OFF; anything else stops configuring). A sanitizer build
# (OSLO_SANITIZE) gives OFF with a message: the bindings' tests are skipped
# there, and an instrumented liboslo loads only into instrumented programs
# (a Go executable does not even link against it).
function(oslo_binding_mode name option out)
  string(TOUPPER "${${option}}" _mode)
  if(_mode MATCHES "^(1|TRUE|YES|Y)$")
    set(_mode ON)
  elseif(_mode MATCHES "^(0|FALSE|NO|N)$")
    set(_mode OFF)
  endif()
  if(NOT _mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${option} must be AUTO, ON or OFF (not ${${option}})")
  endif()
  if(NOT _mode STREQUAL "OFF" AND OSLO_SANITIZE)
    message(STATUS "${name} bindings: skipped in a sanitizer build (OSLO_SANITIZE=${OSLO_SANITIZE})")
    set(_mode OFF)
  endif()
  set(${out} ${_mode} PARENT_SCOPE)
endfunction()

# oslo_binding_prerequisites(<Name> <OPTION> <mode> <out> [MISSING...]):
# sets <out> TRUE when nothing is missing; otherwise stops configuring when
# <mode> is ON (naming <OPTION> and what is missing), or prints
# "<Name> bindings: skipped (no ...)" and sets <out> FALSE.
function(oslo_binding_prerequisites name option mode out)
  set(_missing ${ARGN})
  if(NOT _missing)
    set(${out} TRUE PARENT_SCOPE)
    return()
  endif()
  list(JOIN _missing " and " _missing)
  if(mode STREQUAL "ON")
    message(FATAL_ERROR "${option}=ON needs ${_missing}")
  endif()
  message(STATUS "${name} bindings: skipped (no ${_missing})")
  set(${out} FALSE PARENT_SCOPE)
endfunction()

# oslo_binding_not_built_test(<prefix> <OPTION> <what>): when the binding is
# not built but was not switched off, one test <prefix>_bindings_built says
# so: a skip (exit 77), which OSLO_TEST_STRICT=1 (tools/test.sh) makes a
# failure, so a test run cannot pass without the binding's tests silently.
function(oslo_binding_not_built_test prefix option what)
  string(TOUPPER "${${option}}" _mode)
  if(_mode MATCHES "^(OFF|0|FALSE|NO|N)$")
    return()
  endif()
  add_test(NAME ${prefix}_bindings_built
           COMMAND sh -c "echo 'SKIP: ${what}'; [ \"\${OSLO_TEST_STRICT:-0}\" = 1 ] && exit 1; exit 77")
  set_tests_properties(${prefix}_bindings_built PROPERTIES SKIP_RETURN_CODE 77)
endfunction()
