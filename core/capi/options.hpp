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
// Each struct of oslo.h is declared once, with OSLO_OPTIONS (its table, its
// defaults and its _init), and its shims call the Options methods.
//
// To add a field: append it to the struct in oslo.h, bump its
// OSLO_<OBJECT>_OPTIONS_VERSION, append OSLO_OPTIONS_END(T, new_field) to its
// OSLO_OPTIONS and give the field a default there if it is not zero.
// OSLO_OPTIONS fails to compile until its list has one entry per version and
// the last one ends at the struct's last field.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

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

// One options struct of oslo.h as its shims use it (defined by OSLO_OPTIONS).
template <typename T, size_t N>
struct Options {
  OptionsHistory<T, N> history;
  const char* init_name;  // "oslo_parallel_linear_options_init"
  void (*fill)(T& o);     // sets the fields whose default is not zero

  // The current version's defaults.
  T defaults() const {
    static_assert(std::is_trivially_copyable<T>::value, "options structs are plain C structs");
    T o;
    std::memset(static_cast<void*>(&o), 0, sizeof o);
    o.version = N;
    fill(o);
    return o;
  }
  // The caller's struct (required) as one of the current version.
  T read(const T* given, const char* fn, const char* arg) const {
    return read_options(history, defaults(), given, fn, arg);
  }
  // The same, or the defaults when `given` is NULL.
  T read_or_defaults(const T* given, const char* fn, const char* arg) const {
    return given ? read(given, fn, arg) : defaults();
  }
  // The whole of the T_init shim: the defaults of `version` into `given`.
  oslo_status init(T* given, unsigned version) const {
    return guard([&] { init_options(history, defaults(), given, version, init_name); });
  }
};

template <size_t M>
constexpr size_t options_versions(const size_t (&)[M]) {
  return M;
}
template <size_t M>
constexpr size_t options_last_end(const size_t (&ends)[M]) {
  return ends[M - 1];
}

}  // namespace capi
}  // namespace oslo

// Defines NAME, the oslo::capi::Options of struct T whose current version is
// VERSION (its OSLO_..._OPTIONS_VERSION): FILL, a function (or captureless
// lambda) setting the defaults that are not zero, then one
// OSLO_OPTIONS_END(T, field) per version, of the last field that version has.
// Fails to compile when VERSION and the list disagree or when T has fields
// after the list's last one.
#define OSLO_OPTIONS(NAME, T, VERSION, FILL, ...)                                                  \
  constexpr size_t NAME##Ends[] = {__VA_ARGS__};                                                   \
  static_assert(::oslo::capi::options_versions(NAME##Ends) == (VERSION), #VERSION                  \
                " is not the number of versions listed: append the new version's "                 \
                "OSLO_OPTIONS_END to " #NAME " (core/capi/options.hpp)");                          \
  static_assert(::oslo::capi::options_last_end(NAME##Ends) + alignof(T) > sizeof(T),               \
                #T " has fields after the last version's: add a version (core/capi/options.hpp)"); \
  const ::oslo::capi::Options<T, (VERSION)> NAME = {{#T, #VERSION, {__VA_ARGS__}}, #T "_init", FILL}
