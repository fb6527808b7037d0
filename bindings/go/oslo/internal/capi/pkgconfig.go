package capi

// cgo finds oslo's header and library with pkg-config, in the oslo.pc that
// `cmake --install` (or the liboslo-dev package) puts in the library
// folder's pkgconfig: set PKG_CONFIG_PATH for an install under a prefix of
// your own. Nothing else needs setting (no CGO_CFLAGS or CGO_LDFLAGS).

// #cgo pkg-config: oslo
import "C"
