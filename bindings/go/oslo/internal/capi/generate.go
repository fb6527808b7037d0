// Package capi is the low-level binding SWIG generates from bindings/oslo.i
// (capi.go and capi_wrap.c, written here by gen.sh; never edited by hand and
// not kept in git). Only package oslo uses it: its calls panic on failure
// and take raw handles, which package oslo turns into errors and owned,
// closable values.
package capi

//go:generate sh gen.sh
