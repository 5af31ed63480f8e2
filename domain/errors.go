// Package domain holds the flash-sale service's vocabulary: vouchers, orders,
// stock levels and the errors every other package speaks. It knows nothing of
// GraphQL, Redis or SQL.
package domain

import (
	"errors"
	"fmt"
	"time"
)

// Code classifies an error for clients. The values are the contract's
// GraphQL `extensions.code` strings; the GraphQL layer maps them once.
type Code string

// The contract's error codes.
const (
	CodeUnauthenticated Code = "UNAUTHENTICATED"
	CodeForbidden       Code = "FORBIDDEN"
	CodeRateLimited     Code = "RATE_LIMITED"
	CodeBadInput        Code = "BAD_USER_INPUT"
	CodeNotFound        Code = "NOT_FOUND"
	CodeInternal        Code = "INTERNAL"
	// CodeNotImplemented marks a contract field that a later release owns.
	CodeNotImplemented Code = "NOT_IMPLEMENTED"
	// CodeUnavailable means a dependency (Redis, Postgres) is down or shedding
	// load: safe to retry later.
	CodeUnavailable Code = "UNAVAILABLE"
)

// Error is an error meant for the client: its Message is safe to show (no
// SQL, no stack, no internal address). Anything that is not an *Error is an
// internal fault and is shown only as "internal error".
type Error struct {
	Code    Code
	Message string
	// Field names the offending input field for CodeBadInput, if any.
	Field string
	// RetryAfter is how long to wait, for CodeRateLimited.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }

// Errorf builds a client-facing error with a code.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidField reports bad input for one named field.
func InvalidField(field, format string, args ...any) *Error {
	return &Error{Code: CodeBadInput, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, or
// CodeInternal for anything else (and "" for nil).
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Common errors.
var (
	ErrUnauthenticated = Errorf(CodeUnauthenticated, "missing or invalid bearer token")
	ErrForbidden       = Errorf(CodeForbidden, "this operation needs the admin role")
)

// ErrNotSent marks a store error that proves the call never reached the
// store (a circuit breaker refused it, or no connection could be made):
// unlike a timeout, it cannot have changed anything.
var ErrNotSent = errors.New("the call was not sent")

// NotFound reports an unknown id of the named kind.
func NotFound(kind string, id int64) *Error {
	return Errorf(CodeNotFound, "%s %d not found", kind, id)
}

// RateLimited reports a request over a rate limit.
func RateLimited(retryAfter time.Duration) *Error {
	return &Error{Code: CodeRateLimited, Message: "too many requests; retry later", RetryAfter: retryAfter}
}
