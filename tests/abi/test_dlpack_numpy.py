#!/usr/bin/env python3
"""DLPack interop between oslo's C ABI and numpy >= 2, through ctypes.

Usage: test_dlpack_numpy.py LIBOSLO

numpy 2 asks producers for DLPack 1.x with __dlpack__(max_version=(1, 0))
and exports DLManagedTensorVersioned when asked so. This plays a minimal
binding (what the SWIG bindings will do with PyCapsules) and checks both
directions, versioned and unversioned: zero copy, values, strides, writes
seen on both sides, non-contiguous and read-only arrays refused with
OSLO_ERR_NOT_SUPPORTED. Exits 77 (ctest: skipped) without numpy >= 2.
"""
import ctypes as C
import sys

SKIP = 77
try:
    import numpy as np
except ImportError as exc:  # pragma: no cover - depends on the machine
    print(f"SKIP: needs numpy >= 2 (pip install numpy): {exc}")
    sys.exit(SKIP)
if int(np.__version__.split(".")[0]) < 2:
    print(f"SKIP: needs numpy >= 2 for DLPack 1.x, found {np.__version__}")
    sys.exit(SKIP)

OSLO_OK, OSLO_ERR_NOT_SUPPORTED = 0, 11
OSLO_DTYPE_F32, OSLO_DTYPE_F16 = 0, 1
DLPACK_FLAG_BITMASK_READ_ONLY = 1


class DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", DLDevice), ("ndim", C.c_int32),
                ("dtype", DLDataType), ("shape", C.POINTER(C.c_int64)),
                ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class DLManagedTensor(C.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", C.c_void_p),
                            ("deleter", C.CFUNCTYPE(None, C.POINTER(DLManagedTensor)))]


class DLPackVersion(C.Structure):
    _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32)]


class DLManagedTensorVersioned(C.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion), ("manager_ctx", C.c_void_p),
    ("deleter", C.CFUNCTYPE(None, C.POINTER(DLManagedTensorVersioned))),
    ("flags", C.c_uint64), ("dl_tensor", DLTensor)]

lib = C.CDLL(sys.argv[1])
P = C.c_void_p
for name, args in {
        "oslo_context_create": [C.c_char_p, C.POINTER(P)],
        "oslo_tensor_create": [P, C.c_int, C.c_int, C.POINTER(C.c_int64), C.POINTER(P)],
        "oslo_tensor_copy_from_host": [P, P, C.c_size_t],
        "oslo_tensor_copy_to_host": [P, P, C.c_size_t],
        "oslo_tensor_data": [P, C.POINTER(P)],
        "oslo_tensor_to_dlpack": [P, C.POINTER(P)],
        "oslo_tensor_to_dlpack_versioned": [P, C.POINTER(P)],
        "oslo_tensor_from_dlpack": [P, P, C.POINTER(P)],
        "oslo_tensor_from_dlpack_versioned": [P, P, C.POINTER(P)]}.items():
    getattr(lib, name).argtypes = args
    getattr(lib, name).restype = C.c_int
lib.oslo_tensor_destroy.argtypes = [P]
lib.oslo_context_destroy.argtypes = [P]
lib.oslo_last_error.restype = C.c_char_p

# The capsule API (what a binding written in C would call directly).
capsule_new = C.pythonapi.PyCapsule_New
capsule_new.argtypes = [P, C.c_char_p, P]
capsule_new.restype = C.py_object
capsule_get = C.pythonapi.PyCapsule_GetPointer
capsule_get.argtypes = [C.py_object, C.c_char_p]
capsule_get.restype = P
capsule_set_name = C.pythonapi.PyCapsule_SetName
capsule_set_name.argtypes = [C.py_object, C.c_char_p]
capsule_set_name.restype = C.c_int
# The capsule names must outlive the capsules: module-level bytes.
DLTENSOR, DLTENSOR_VERSIONED = b"dltensor", b"dltensor_versioned"

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def ok(status, what):
    check(status == OSLO_OK, f"{what}: status {status}: {lib.oslo_last_error().decode()}")


ctx = P()
ok(lib.oslo_context_create(b'{"timeout_seconds": 30}', C.byref(ctx)), "context")


def oslo_tensor(values, dtype_code):
    shape = (C.c_int64 * values.ndim)(*values.shape)
    t = P()
    ok(lib.oslo_tensor_create(ctx, dtype_code, values.ndim, shape, C.byref(t)), "tensor_create")
    ok(lib.oslo_tensor_copy_from_host(t, values.ctypes.data, values.nbytes), "copy_from_host")
    return t


def data_ptr(t):
    p = P()
    ok(lib.oslo_tensor_data(t, C.byref(p)), "tensor_data")
    return p.value


class OsloArray:
    """What a binding's tensor type offers numpy: __dlpack__ and __dlpack_device__."""

    def __init__(self, t):
        self.t = t
        self.asked = None

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.asked = max_version
        m = P()
        # No capsule destructor: numpy consumes the capsule (a real binding
        # passes one that calls the deleter of an unconsumed capsule).
        if max_version is not None and tuple(max_version) >= (1, 0):
            ok(lib.oslo_tensor_to_dlpack_versioned(self.t, C.byref(m)), "to_dlpack_versioned")
            managed = C.cast(m, C.POINTER(DLManagedTensorVersioned)).contents
            check(managed.version.major == 1 and managed.flags == 0, "versioned header")
            dl = managed.dl_tensor
            name = DLTENSOR_VERSIONED
        else:
            ok(lib.oslo_tensor_to_dlpack(self.t, C.byref(m)), "to_dlpack")
            dl = C.cast(m, C.POINTER(DLManagedTensor)).contents.dl_tensor
            name = DLTENSOR
        check(bool(dl.strides), "exported strides are not NULL")
        return capsule_new(m, name, None)


def import_into_oslo(arr, versioned):
    """Returns (status, oslo tensor or None); the capsule is consumed on success."""
    cap = arr.__dlpack__(max_version=(1, 0)) if versioned else arr.__dlpack__()
    name = DLTENSOR_VERSIONED if versioned else DLTENSOR
    ptr = capsule_get(cap, name)
    t = P()
    fn = lib.oslo_tensor_from_dlpack_versioned if versioned else lib.oslo_tensor_from_dlpack
    st = fn(ctx, ptr, C.byref(t))
    if st == OSLO_OK:  # oslo owns it now: numpy's capsule must not free it
        capsule_set_name(cap, b"used_" + name)
        return st, t
    return st, None  # numpy's capsule destructor calls the deleter


# oslo -> numpy, versioned (numpy 2 asks for max_version (1, 0)) and not.
values = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
for force_unversioned in (False, True):
    t = oslo_tensor(values, OSLO_DTYPE_F32)
    src = OsloArray(t)
    if force_unversioned:  # what an older consumer sees
        cap = src.__dlpack__()
        check(src.asked is None, "unversioned path")

        class Old:
            def __dlpack_device__(self):
                return (1, 0)

            def __dlpack__(self, stream=None):
                return cap

        a = np.from_dlpack(Old())
    else:
        a = np.from_dlpack(src)
        check(src.asked is not None and tuple(src.asked) >= (1, 0),
              f"numpy asked for DLPack >= 1.0, asked {src.asked}")
    check(a.shape == (3, 4) and a.dtype == np.float32, f"shape/dtype {a.shape} {a.dtype}")
    check(np.array_equal(a, values), "values oslo -> numpy")
    check(a.ctypes.data == data_ptr(t), "zero copy oslo -> numpy")
    if force_unversioned:
        # An unversioned tensor cannot say it is writable: numpy 2 plays safe.
        check(not a.flags.writeable, "numpy marks unversioned imports read-only")
    else:
        check(a.flags.writeable, "writable in numpy (versioned, flags 0)")
        a[0, 0] = 42
        back = np.empty_like(values)
        ok(lib.oslo_tensor_copy_to_host(t, back.ctypes.data, back.nbytes), "copy_to_host")
        check(back[0, 0] == 42, "numpy's write seen by oslo")
    lib.oslo_tensor_destroy(t)  # the export keeps the memory alive
    check(a[2, 3] == values[2, 3], "memory outlives the oslo tensor")
    del a

# numpy -> oslo, versioned and not.
for versioned in (True, False):
    x = np.linspace(-1, 1, 6, dtype=np.float16).reshape(2, 3)
    st, t = import_into_oslo(x, versioned)
    ok(st, f"from_dlpack (versioned={versioned})")
    if t:
        check(data_ptr(t) == x.ctypes.data, "zero copy numpy -> oslo")
        y = np.full((2, 3), 7, dtype=np.float16)
        ok(lib.oslo_tensor_copy_from_host(t, y.ctypes.data, y.nbytes), "write through oslo")
        check(np.array_equal(x, y), "oslo's write seen by numpy")
        lib.oslo_tensor_destroy(t)  # calls numpy's deleter

# Refused, numpy keeps the tensor: non-contiguous, read-only.
x = np.arange(6, dtype=np.float32).reshape(2, 3)
st, t = import_into_oslo(x.T, True)
check(st == OSLO_ERR_NOT_SUPPORTED and b"contiguous" in lib.oslo_last_error(),
      f"transposed: status {st}")
st, t = import_into_oslo(x[:, ::2], False)
check(st == OSLO_ERR_NOT_SUPPORTED, f"strided slice: status {st}")
ro = x.copy()
ro.flags.writeable = False
cap = ro.__dlpack__(max_version=(1, 0))
managed = C.cast(capsule_get(cap, DLTENSOR_VERSIONED), C.POINTER(DLManagedTensorVersioned))
check(managed.contents.flags & DLPACK_FLAG_BITMASK_READ_ONLY, "numpy flags read-only arrays")
del cap, managed
st, t = import_into_oslo(ro, True)
check(st == OSLO_ERR_NOT_SUPPORTED and b"read-only" in lib.oslo_last_error(),
      f"read-only: status {st}")

lib.oslo_context_destroy(ctx)
print(f"numpy {np.__version__}: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
