// The backend glue (backends/common/oslo_backend_glue.hpp) on its own: the
// table a struct of entries makes (sizes, version, every entry where the
// struct put it and NULL elsewhere), its v1 copy, the statuses and messages
// of the exception guard, create_instance, read_options, enum_value and
// check_copy, the entry groups and the dtype helpers.
//
// Compiled with -DGLUE_BROKEN=<n>, it declares a table that breaks one rule
// and must not compile; the glue_rejects_* tests check the compiler's
// message names the rule (see CMakeLists.txt).
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "oslo_backend_glue.hpp"

#ifndef GLUE_BROKEN
#define GLUE_BROKEN 0
#endif

namespace {

int passed = 0, failed = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

namespace glue = oslo_backend_glue;

struct Instance {
  std::string error = "no error";
  int started = 0;
  static int live;
  Instance() { ++live; }
  ~Instance() { --live; }
};
int Instance::live = 0;

// Messages as the CUDA plugin words them, and as the torch plugin does
// (texts naming the entry themselves, a library exception mapped).
struct EntryFirst : glue::Messages {
  static constexpr const char* kPrefix = "t: ";
  static constexpr const char* kOutOfMemory = "out of host memory";
};
struct LibraryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct OwnTexts : glue::Messages {
  static constexpr const char* kPrefix = "u: ";
  static constexpr bool kEntryInFailure = false;
  static bool translate(const std::string& where, std::string* message, oslo_status* status) {
    try {
      throw;
    } catch (const LibraryError& e) {
      *message = where + "library: " + e.what();
      *status = OSLO_ERR_NOT_SUPPORTED;
      return true;
    } catch (...) {
      return false;
    }
  }
};

// A minimal backend: every required entry, events, nothing else.
oslo_status create(void** self, const oslo_backend_options* o, const char** error) {
  return glue::create_instance<EntryFirst, Instance>(self, error, [&](Instance& in) {
    if (o && o->local_rank < 0) glue::fail(OSLO_ERR_CONFIG, "local_rank < 0");
    in.started = 1;
  });
}
void destroy(void* self) {
  delete static_cast<Instance*>(self);
}
const char* last_error(void* self) {
  return static_cast<Instance*>(self)->error.c_str();
}
int32_t device_type(void*) {
  return 1;
}
int32_t device_id(void*) {
  return 0;
}
int host_accessible(void*) {
  return 1;
}
oslo_status alloc(void*, size_t, void**) {
  return OSLO_OK;
}
void free_(void*, void*, size_t) {}
oslo_status copy(void* self, void* dst, const void* src, size_t bytes, oslo_bk_copy_kind kind) {
  return glue::guard<EntryFirst, Instance>(self, "copy", [&](Instance&) {
    if (glue::check_copy("", kind, dst, src, bytes)) std::memmove(dst, src, bytes);
  });
}
oslo_status synchronize(void*) {
  return OSLO_OK;
}
oslo_status set_num_threads(void*, int) {
  return OSLO_OK;
}
using V = oslo_bk_view;
oslo_status convert(void*, const V*, const V*) {
  return OSLO_OK;
}
oslo_status fill(void*, const V*, double) {
  return OSLO_OK;
}
oslo_status matmul(void*, const V*, const V*, const V*, const V*, float, float) {
  return OSLO_OK;
}
oslo_status binary(void*, oslo_bk_binary, const V*, const V*, const V*) {
  return OSLO_OK;
}
oslo_status unary(void*, oslo_bk_unary, const V*, const V*, float) {
  return OSLO_OK;
}
oslo_status unary_backward(void*, oslo_bk_unary, const V*, const V*, const V*, float) {
  return OSLO_OK;
}
oslo_status reduce(void*, oslo_bk_reduce, const V*, const V*, const V*, int64_t, int) {
  return OSLO_OK;
}
oslo_status sum_rows(void*, const V*, const V*, int) {
  return OSLO_OK;
}
oslo_status softmax(void*, const V*, const V*, const V*, float, int, int64_t) {
  return OSLO_OK;
}
oslo_status softmax_backward(void*, const V*, const V*, const V*, float) {
  return OSLO_OK;
}
oslo_status norm(void*, const V*, const V*, const V*, const V*, float, int) {
  return OSLO_OK;
}
oslo_status gather_rows(void*, const V*, const V*, const V*, int64_t, int64_t) {
  return OSLO_OK;
}
oslo_status scatter_add_rows(void*, const V*, const V*, const V*, int64_t) {
  return OSLO_OK;
}
oslo_status gather_cols(void*, const V*, const V*, const V*, int64_t, int64_t, int64_t) {
  return OSLO_OK;
}
oslo_status scatter_add_cols(void*, const V*, const V*, int64_t, int64_t, float) {
  return OSLO_OK;
}
oslo_status event_create(void*, void**) {
  return OSLO_OK;
}
void event_destroy(void*, void*) {}
oslo_status event_op(void*, void*) {
  return OSLO_OK;
}
[[maybe_unused]] void host_free(void*, void*) {}

struct Test {
  static constexpr const char* name = "glue_test";
  OSLO_BACKEND_ENTRY(create, create);
  OSLO_BACKEND_ENTRY(destroy, destroy);
  OSLO_BACKEND_ENTRY(last_error, last_error);
  OSLO_BACKEND_ENTRY(device_type, device_type);
  OSLO_BACKEND_ENTRY(device_id, device_id);
  OSLO_BACKEND_ENTRY(host_accessible, host_accessible);
  OSLO_BACKEND_ENTRY(alloc, alloc);
  OSLO_BACKEND_ENTRY(free, free_);
  OSLO_BACKEND_ENTRY(copy, copy);
  OSLO_BACKEND_ENTRY(synchronize, synchronize);
  OSLO_BACKEND_ENTRY(set_num_threads, set_num_threads);
  OSLO_BACKEND_ENTRY(convert, convert);
  OSLO_BACKEND_ENTRY(fill, fill);
#if GLUE_BROKEN != 1
  OSLO_BACKEND_ENTRY(matmul, matmul);
#endif
  OSLO_BACKEND_ENTRY(binary, binary);
  OSLO_BACKEND_ENTRY(unary, unary);
  OSLO_BACKEND_ENTRY(unary_backward, unary_backward);
  OSLO_BACKEND_ENTRY(reduce, reduce);
  OSLO_BACKEND_ENTRY(sum_rows, sum_rows);
  OSLO_BACKEND_ENTRY(softmax, softmax);
  OSLO_BACKEND_ENTRY(softmax_backward, softmax_backward);
  OSLO_BACKEND_ENTRY(norm, norm);
  OSLO_BACKEND_ENTRY(gather_rows, gather_rows);
  OSLO_BACKEND_ENTRY(scatter_add_rows, scatter_add_rows);
  OSLO_BACKEND_ENTRY(gather_cols, gather_cols);
  OSLO_BACKEND_ENTRY(scatter_add_cols, scatter_add_cols);
  OSLO_BACKEND_ENTRY(copy_async, copy);
  OSLO_BACKEND_ENTRY(event_create, event_create);
  OSLO_BACKEND_ENTRY(event_destroy, event_destroy);
  OSLO_BACKEND_ENTRY(event_record, event_op);
#if GLUE_BROKEN != 2
  OSLO_BACKEND_ENTRY(event_wait, event_op);
#endif
  OSLO_BACKEND_ENTRY(event_synchronize, event_op);
#if GLUE_BROKEN == 3
  OSLO_BACKEND_ENTRY(host_free, host_free);
#endif
#if GLUE_BROKEN == 4
  OSLO_BACKEND_ENTRY(matmul_act, matmul);  // another entry's signature
#endif
};

oslo_backend_iface table() {
  return glue::make_table<Test>();
}

// The same required entries as a group (functions named by convention),
// and a group of declared functions with a prefix.
OSLO_BACKEND_DECLARE(GRAPHS, rec_)
oslo_status rec_graph_begin(void*) {
  return OSLO_ERR_NOT_SUPPORTED;
}
oslo_status rec_graph_end(void*, int) {
  return OSLO_OK;
}
struct Grouped {
  static constexpr const char* name = "glue_grouped";
  OSLO_BACKEND_ENTRIES(REQUIRED, )
  OSLO_BACKEND_ENTRIES(GRAPHS, rec_)
};

}  // namespace

OSLO_BACKEND_DL_IMPL(table)

namespace {

// status_of_current_exception<M> for what `thrower` throws inside `entry`.
template <class M, class T>
oslo_status status_of(T thrower, const char* entry, std::string* message) {
  return glue::guarded<M>(message, entry, thrower);
}

void test_table() {
  const oslo_backend_iface* t = oslo_backend_plugin_v2();
  check(t->struct_size == sizeof(oslo_backend_iface), "struct_size is the whole table's");
  check(t->abi_version == OSLO_BACKEND_ABI_VERSION, "abi_version is this header's");
  check(std::strcmp(t->name, "glue_test") == 0, "name");
  check(t->create == &create && t->free == &free_ && t->matmul == &matmul,
        "entries land in their slots");
  check(t->copy_async == &copy && t->event_wait == &event_op, "v2 entries land in their slots");
  check(t->comm_create == nullptr && t->alloc_async == nullptr && t->attention == nullptr &&
            t->graph_begin == nullptr && t->pack_weight == nullptr && t->host_free == nullptr,
        "absent entries are NULL");
  check(oslo_backend_plugin_v2() == t, "one table");
  const oslo_backend_iface* v1 = oslo_backend_plugin_v1();
  check(v1->abi_version == 1 && v1->struct_size == OSLO_BACKEND_IFACE_V1_SIZE,
        "the v1 copy says ABI v1 and v1's size");
  check(std::memcmp(&v1->name, &t->name,
                    OSLO_BACKEND_IFACE_V1_SIZE - offsetof(oslo_backend_iface, name)) == 0,
        "the v1 copy has v1's entries of the table");
}

void test_groups() {
  const oslo_backend_iface g = glue::make_table<Grouped>();
  const oslo_backend_iface* t = oslo_backend_plugin_v2();
  const size_t from = offsetof(oslo_backend_iface, create);
  const size_t to = offsetof(oslo_backend_iface, comm_create);
  check(std::memcmp(reinterpret_cast<const char*>(&g) + from,
                    reinterpret_cast<const char*>(t) + from, to - from) == 0,
        "OSLO_BACKEND_ENTRIES(REQUIRED, ) takes the entries by their names");
  check(g.graph_begin == &rec_graph_begin && g.graph_end == &rec_graph_end,
        "a group with a prefix");
  check(g.copy_async == nullptr && g.event_create == nullptr, "nothing else");
}

void test_messages() {
  std::string m;
  oslo_status s =
      status_of<EntryFirst>([] { glue::fail(OSLO_ERR_SHAPE, "bad shape"); }, "norm", &m);
  check(s == OSLO_ERR_SHAPE && m == "t: norm: bad shape", "Failure: status, prefix, entry: " + m);
  s = status_of<OwnTexts>([] { glue::fail(OSLO_ERR_SHAPE, "norm: bad shape"); }, "norm", &m);
  check(s == OSLO_ERR_SHAPE && m == "u: norm: bad shape", "Failure without the entry: " + m);
  s = status_of<EntryFirst>([] { throw std::bad_alloc(); }, "alloc", &m);
  check(s == OSLO_ERR_OUT_OF_MEMORY && m == "t: alloc: out of host memory", "bad_alloc: " + m);
  s = status_of<OwnTexts>([] { throw std::bad_alloc(); }, "alloc", &m);
  check(s == OSLO_ERR_OUT_OF_MEMORY && m == "u: alloc: out of memory", "bad_alloc default: " + m);
  s = status_of<EntryFirst>([] { throw std::logic_error("oops"); }, "fill", &m);
  check(s == OSLO_ERR_INTERNAL && m == "t: fill: oops", "std::exception: " + m);
  s = status_of<EntryFirst>([] { throw 42; }, "fill", &m);
  check(s == OSLO_ERR_INTERNAL && m == "t: fill: unknown exception", "anything else: " + m);
  s = status_of<OwnTexts>([] { throw LibraryError("no kernel"); }, "matmul", &m);
  check(s == OSLO_ERR_NOT_SUPPORTED && m == "u: matmul: library: no kernel",
        "translate() maps a library's exception: " + m);
  s = status_of<EntryFirst>([] { throw LibraryError("no kernel"); }, "matmul", &m);
  check(s == OSLO_ERR_INTERNAL && m == "t: matmul: no kernel",
        "without translate() it is a std::exception: " + m);
  s = status_of<glue::Messages>([] { glue::fail(OSLO_ERR_DTYPE, "f64"); }, nullptr, &m);
  check(s == OSLO_ERR_DTYPE && m == "f64", "no prefix, no entry: " + m);
  s = status_of<EntryFirst>([] {}, "sync", &m);
  check(s == OSLO_OK, "a body that returns is OSLO_OK");
}

void test_instances() {
  const oslo_backend_iface* t = oslo_backend_plugin_v2();
  const char* err = nullptr;
  check(t->create(nullptr, nullptr, &err) == OSLO_ERR_INVALID_ARGUMENT && err &&
            std::strcmp(err, "t: create: self is NULL") == 0,
        "create without self");
  oslo_backend_options o{};
  o.struct_size = sizeof o;
  o.local_rank = -1;
  void* self = reinterpret_cast<void*>(1);
  err = nullptr;
  check(t->create(&self, &o, &err) == OSLO_ERR_CONFIG && self == nullptr && err &&
            std::strcmp(err, "t: create: local_rank < 0") == 0 && Instance::live == 0,
        "a failed start: status, message, no instance left");
  o.local_rank = 0;
  check(t->create(&self, &o, &err) == OSLO_OK && self && static_cast<Instance*>(self)->started,
        "create");
  char a[4] = "abc", b[4] = "xyz";
  check(t->copy(nullptr, a, b, 3, OSLO_BK_DEVICE_TO_DEVICE) == OSLO_ERR_INVALID_ARGUMENT,
        "an entry without an instance");
  check(
      t->copy(self, a, b, 3, OSLO_BK_DEVICE_TO_DEVICE) == OSLO_OK && std::memcmp(a, "xyz", 3) == 0,
      "copy");
  oslo_bk_copy_kind bad;
  const int v = 7;
  std::memcpy(&bad, &v, sizeof v);
  check(glue::enum_value(bad) == 7, "enum_value reads any int");
  check(t->copy(self, a, b, 3, bad) == OSLO_ERR_INVALID_ARGUMENT &&
            std::strcmp(t->last_error(self), "t: copy: unknown kind 7") == 0,
        std::string("an unknown copy kind: ") + t->last_error(self));
  check(t->copy(self, nullptr, b, 3, OSLO_BK_HOST_TO_DEVICE) == OSLO_ERR_INVALID_ARGUMENT &&
            std::strcmp(t->last_error(self), "t: copy: NULL pointer for 3 bytes") == 0,
        std::string("a NULL end: ") + t->last_error(self));
  check(t->copy(self, nullptr, nullptr, 0, OSLO_BK_HOST_TO_DEVICE) == OSLO_OK,
        "an empty copy may have NULL ends");
  t->destroy(self);
  check(Instance::live == 0, "destroy");
}

void test_options() {
  glue::Options o = glue::read_options(nullptr);
  check(o.local_rank == 0 && o.num_threads == 0 && std::strcmp(o.extra_json, "{}") == 0,
        "no options: the defaults");
  oslo_backend_options full{};
  full.struct_size = sizeof full;
  full.local_rank = 3;
  full.num_threads = 5;
  full.extra_json = "{\"a\": 1}";
  o = glue::read_options(&full);
  check(o.local_rank == 3 && o.num_threads == 5 && std::strcmp(o.extra_json, "{\"a\": 1}") == 0,
        "every field");
  oslo_backend_options old = full;
  old.struct_size = offsetof(oslo_backend_options, num_threads);
  o = glue::read_options(&old);
  check(o.local_rank == 3 && o.num_threads == 0 && std::strcmp(o.extra_json, "{}") == 0,
        "a smaller struct: the fields past it are not read");
  full.extra_json = nullptr;
  check(std::strcmp(glue::read_options(&full).extra_json, "{}") == 0, "extra_json NULL: {}");
}

// A stand-in for a JSON library: "{...}" is an object, "[...]" a value,
// anything else not JSON.
struct FakeJson {
  bool object = false;
  static FakeJson parse(const char* text) {
    if (text[0] == '[') return FakeJson{};
    if (text[0] != '{') throw std::invalid_argument("parse error at 1");
    return FakeJson{true};
  }
  bool is_object() const { return object; }
};

void test_json() {
  std::string m;
  oslo_status s = status_of<glue::Messages>(
      [] { check(glue::parse_json_object<FakeJson>("{}", "opts").is_object(), "an object"); },
      nullptr, &m);
  check(s == OSLO_OK, "an object parses");
  s = status_of<glue::Messages>([] { glue::parse_json_object<FakeJson>("nope", "opts"); }, nullptr,
                                &m);
  check(s == OSLO_ERR_FORMAT && m == "opts is not valid JSON: parse error at 1", "not JSON: " + m);
  s = status_of<glue::Messages>([] { glue::parse_json_object<FakeJson>("[1]", "opts"); }, nullptr,
                                &m);
  check(s == OSLO_ERR_FORMAT && m == "opts must be a JSON object", "not an object: " + m);
}

void test_dtypes() {
  check(glue::dtype_size(OSLO_DTYPE_BF16) == 2 && glue::dtype_size(OSLO_DTYPE_I64) == 8 &&
            glue::dtype_size(static_cast<oslo_dtype>(99)) == 0,
        "dtype_size");
  check(std::strcmp(glue::dtype_name(OSLO_DTYPE_F16), "f16") == 0 &&
            std::strcmp(glue::dtype_name(static_cast<oslo_dtype>(99)), "unknown dtype") == 0,
        "dtype_name");
  check(glue::is_float(OSLO_DTYPE_BF16) && !glue::is_float(OSLO_DTYPE_I32) &&
            glue::is_int(OSLO_DTYPE_I64) && !glue::is_int(OSLO_DTYPE_F32),
        "is_float, is_int");
}

}  // namespace

int main() {
  test_table();
  test_groups();
  test_messages();
  test_instances();
  test_options();
  test_json();
  test_dtypes();
  std::printf("backend glue: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
