# The native libraries oslo.jar carries (bindings/java/CMakeLists.txt runs
# this with cmake -P after every build of them):
#
#   cmake -DOUT=<dir> -DSTRIP=<strip> -DFILES=<src>=<name>|... -DORIGIN=<name>;...
#         -P OsloJavaNatives.cmake
#
# copies each <src> to <dir>/<name>, strips it (--strip-unneeded: no debug
# information in the jar), sets the RUNPATH of the names in ORIGIN to
# $ORIGIN (the JNI library finds liboslo in its own folder) and removes any
# other (no build-tree path in a shipped file), and writes <dir>/SHA256SUMS ("<sha256>  <name>" per line,
# sha256sum's format) that org.oslo.NativeLoader checks the cache against.
# Files in <dir> not listed are removed.
cmake_minimum_required(VERSION 3.21)
foreach(v OUT FILES)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "OsloJavaNatives.cmake: -D${v}= is required")
  endif()
endforeach()
file(MAKE_DIRECTORY "${OUT}")
file(GLOB _old "${OUT}/*")
string(REPLACE "|" ";" FILES "${FILES}")
set(_sums "")
set(_names "")
foreach(pair ${FILES})
  string(REGEX MATCH "^(.*)=([^=/]+)$" _m "${pair}")
  if(NOT _m)
    message(FATAL_ERROR "OsloJavaNatives.cmake: '${pair}' is not <src>=<name>")
  endif()
  set(src "${CMAKE_MATCH_1}")
  set(name "${CMAKE_MATCH_2}")
  set(dst "${OUT}/${name}")
  # A temporary name, renamed at the end: the jar never sees half a file.
  file(COPY_FILE "${src}" "${dst}.tmp")
  if(STRIP)
    execute_process(COMMAND "${STRIP}" --strip-unneeded "${dst}.tmp" RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "${STRIP} --strip-unneeded ${dst}.tmp failed")
    endif()
  endif()
  # A build-tree RUNPATH (an absolute path of this machine) is replaced by
  # $ORIGIN for the names in ORIGIN and dropped from the others.
  if(name IN_LIST ORIGIN)
    file(RPATH_SET FILE "${dst}.tmp" NEW_RPATH "$ORIGIN")
  else()
    file(RPATH_REMOVE FILE "${dst}.tmp")
  endif()
  file(RENAME "${dst}.tmp" "${dst}")
  file(SHA256 "${dst}" _h)
  string(APPEND _sums "${_h}  ${name}\n")
  list(APPEND _names "${dst}")
endforeach()
list(APPEND _names "${OUT}/SHA256SUMS")
file(WRITE "${OUT}/SHA256SUMS.tmp" "${_sums}")
file(RENAME "${OUT}/SHA256SUMS.tmp" "${OUT}/SHA256SUMS")
foreach(f ${_old})
  if(NOT f IN_LIST _names)
    file(REMOVE "${f}")
  endif()
endforeach()
