/*
 * oslo_go.i - the Go part of the SWIG interface (bindings/oslo.i).
 *
 * Included by oslo.i before oslo.h (SWIGGO only): the %exception that panics
 * with the status for bindings/go/oslo to recover, and the typemaps.
 */

/* Go: a failed call panics, from inside this C wrapper call (so on the
   failing OS thread, before anything else can overwrite oslo's thread-local
   message), with the string "\001oslo\001<status>\001<message>". The
   hand-written package (bindings/go/oslo, func call) recovers exactly such
   a panic into an *oslo.Error return and re-panics anything else; no panic
   ever reaches a user of the Go package. $cleanup frees the C copies of
   string arguments, which the panic would skip. */
%exception {
  oslo_bind_status = OSLO_OK;
  $action
  if (oslo_bind_status != OSLO_OK) {
    char buf_[640];
    snprintf(buf_, sizeof buf_, "\001oslo\001%d\001%s", (int)oslo_bind_status,
             oslo_bind_error_message());
    $cleanup
    _swig_gopanic(buf_);
  }
}

/* A shape: []int64. Memory: []byte (nil is NULL), used during the call. */
%typemap(gotype) (int ndim, const int64_t *shape) "[]int64"
%typemap(in) (int ndim, const int64_t *shape) {
  $1 = (int)$input.len;
  $2 = ($2_ltype)$input.array;
}
%typemap(gotype) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) "[]byte"
%typemap(in) (const void *INBUF, size_t INBYTES), (void *OUTBUF, size_t OUTBYTES) {
  $1 = $input.len ? (void *)$input.array : NULL;
  $2 = (size_t)$input.len;
}
