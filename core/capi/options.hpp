// Versioned options structs (see "Options structs" in oslo.h).
//
// Every options struct starts with `unsigned int version` and grows only by
// appending fields. For each struct the shim keeps a table: ends[v - 1] is
// the offset just past the last field of version v (OSLO_OPTIONS_END of that
// field), so
//  - reading a caller's struct of version v copies only ends[v - 1] bytes and
//    keeps the defaults for every later field;
//  - _init(&opts, v) writes only ends[v - 1] bytes, so an old program's
//    smaller struct is never overrun.
// The offsets of old fields never change (append-only), so the ends are
// computed from the current struct. Ends of fields rather than sizeof of
// each version: a field appended in version v+1 may sit in version v's tail
// padding, which an old caller's struct does have but never initialised.
//
// To add a field: append it to the struct in oslo.h, bump its
// OSLO_<OBJECT>_OPTIONS_VERSION, append OSLO_OPTIONS_END(T, new_field) to its
// table and give the field a default. OSLO_OPTIONS_LAST_FIELD fails to
// compile until the table's last entry is the struct's last field.
#pragma once

#include <cstddef>
#include <cstring>

#include "core/capi/handles.hpp"

#define OSLO_OPTIONS_END(T, field) (offsetof(T, field) + sizeof(static_cast<T*>(nullptr)->field))

// The last field must end exactly where the struct's trailing padding starts:
// catches a field appended without a new table entry (unless it fits in the
// padding, which the version-bump rule in oslo.h covers).
#define OSLO_OPTIONS_LAST_FIELD(T, field)                            \
  static_assert(OSLO_OPTIONS_END(T, field) + alignof(T) > sizeof(T), \
                #T " has fields after " #field ": add a version (core/capi/options.hpp)")

namespace oslo {
namespace capi {

template <typename T, size_t N>
struct OptionsHistory {
  const char* type;          // "oslo_parallel_linear_options"
  const char* version_name;  // "OSLO_PARALLEL_LINEAR_OPTIONS_VERSION"
  size_t ends[N];            // ends[v - 1]: end of version v's last field
};

template <typename T, size_t N>
void check_version(const OptionsHistory<T, N>& h, unsigned version, const char* fn,
                   const char* arg) {
  if (version == 0)
    fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": ", arg, " version is 0: initialise the ", h.type,
         " with ", h.type, "_init(&options, ", h.version_name, ")");
  if (version > N)
    fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": ", arg, " version ", version,
         " is unknown: this liboslo (", OSLO_VERSION_STRING, ") knows ", h.type, " versions 1 to ",
         N, "; the program was compiled against a newer oslo.h than the library it runs with");
}

// The caller's struct of any known version, as a struct of the current one
// (fields the caller's version lacks get `defaults`).
template <typename T, size_t N>
T read_options(const OptionsHistory<T, N>& h, const T& defaults, const T* given, const char* fn,
               const char* arg) {
  need(given, fn, arg);
  // `version` is the first field of every version: safe to read.
  check_version(h, given->version, fn, arg);
  T out = defaults;
  std::memcpy(static_cast<void*>(&out), given, h.ends[given->version - 1]);
  out.version = N;
  return out;
}

// Writes the defaults of `version` into a caller's struct of that version.
template <typename T, size_t N>
void init_options(const OptionsHistory<T, N>& h, const T& defaults, T* given, unsigned version,
                  const char* fn) {
  need(given, fn, "options");
  check_version(h, version, fn, "options");
  T d = defaults;
  d.version = version;
  std::memcpy(static_cast<void*>(given), &d, h.ends[version - 1]);
}

}  // namespace capi
}  // namespace oslo
