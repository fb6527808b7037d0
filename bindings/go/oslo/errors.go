package oslo

import (
	"fmt"
	"strconv"
	"strings"
)

// Status is the result code of an oslo call (oslo_status in oslo.h). The
// values are the C ABI's and never change.
type Status int

// The statuses of oslo.h. StatusOK is never the Status of an *Error.
const (
	StatusOK                 Status = 0
	StatusInvalidArgument    Status = 1
	StatusOutOfMemory        Status = 2
	StatusBackendUnavailable Status = 3
	StatusComm               Status = 4
	StatusTimeout            Status = 5
	StatusIO                 Status = 6
	StatusFormat             Status = 7
	StatusShape              Status = 8
	StatusDType              Status = 9
	StatusConfig             Status = 10
	StatusNotSupported       Status = 11
	StatusInternal           Status = 12
)

var statusNames = [...]string{
	"OSLO_OK", "OSLO_ERR_INVALID_ARGUMENT", "OSLO_ERR_OUT_OF_MEMORY",
	"OSLO_ERR_BACKEND_UNAVAILABLE", "OSLO_ERR_COMM", "OSLO_ERR_TIMEOUT", "OSLO_ERR_IO",
	"OSLO_ERR_FORMAT", "OSLO_ERR_SHAPE", "OSLO_ERR_DTYPE", "OSLO_ERR_CONFIG",
	"OSLO_ERR_NOT_SUPPORTED", "OSLO_ERR_INTERNAL",
}

// String returns the C name of the status, e.g. "OSLO_ERR_CONFIG".
func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "OSLO_STATUS(" + strconv.Itoa(int(s)) + ")"
}

// Error is the error every failing call of package oslo returns: the
// status and the message oslo (or this package, for an argument it refuses
// itself) gave. The message is read in the same C call that failed, on the
// same OS thread, so it always belongs to this error.
//
// Test for a status with errors.Is and the sentinels (errors.Is(err,
// oslo.ErrConfig)) or get the details with errors.As:
//
//	var e *oslo.Error
//	if errors.As(err, &e) { fmt.Println(e.Status, e.Message) }
type Error struct {
	Status  Status // never StatusOK
	Message string // e.g. "config: unknown key 'tensor_paralel_size'"
}

// Error formats the error as "oslo: OSLO_ERR_CONFIG: <message>".
func (e *Error) Error() string {
	return "oslo: " + e.Status.String() + ": " + e.Message
}

// Is reports whether target is an *Error of the same Status: the sentinels
// below (which have no message) match every error of their status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status && (t.Message == "" || t.Message == e.Message)
}

// Sentinels, one per status, for errors.Is.
var (
	ErrInvalidArgument    = &Error{Status: StatusInvalidArgument}
	ErrOutOfMemory        = &Error{Status: StatusOutOfMemory}
	ErrBackendUnavailable = &Error{Status: StatusBackendUnavailable}
	ErrComm               = &Error{Status: StatusComm}
	ErrTimeout            = &Error{Status: StatusTimeout}
	ErrIO                 = &Error{Status: StatusIO}
	ErrFormat             = &Error{Status: StatusFormat}
	ErrShape              = &Error{Status: StatusShape}
	ErrDType              = &Error{Status: StatusDType}
	ErrConfig             = &Error{Status: StatusConfig}
	ErrNotSupported       = &Error{Status: StatusNotSupported}
	ErrInternal           = &Error{Status: StatusInternal}
)

// errorf makes an error this package finds itself (before any C call).
func errorf(s Status, format string, args ...interface{}) error {
	return &Error{Status: s, Message: fmt.Sprintf(format, args...)}
}

// errClosed is the error of a call on a nil or closed handle.
func errClosed(what string) error {
	return errorf(StatusInvalidArgument, "%s is nil or closed", what)
}

// panicPrefix starts the panic value of bindings/oslo.i's Go %exception:
// "\x01oslo\x01<status>\x01<message>".
const panicPrefix = "\x01oslo\x01"

// call runs f, one or more calls of the generated package, and turns the
// panic its %exception raises on failure into an *Error. Any other panic
// (a bug) goes on.
func call(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e := asError(r)
			if e == nil {
				panic(r)
			}
			err = e
		}
	}()
	f()
	return nil
}

func asError(r interface{}) *Error {
	s, ok := r.(string)
	if !ok || !strings.HasPrefix(s, panicPrefix) {
		return nil
	}
	rest := s[len(panicPrefix):]
	i := strings.IndexByte(rest, '\x01')
	if i < 0 {
		return nil
	}
	code, err := strconv.Atoi(rest[:i])
	if err != nil {
		return nil
	}
	return &Error{Status: Status(code), Message: rest[i+1:]}
}
