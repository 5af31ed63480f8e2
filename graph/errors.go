package graph

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
)

// PresentErrors is the one place where errors become GraphQL errors:
//   - a *domain.Error keeps its message and gets its code;
//   - a *gqlerror.Error that wraps no other error is one gqlgen raised about
//     the request itself (body, parse, validation, complexity, depth):
//     BAD_USER_INPUT, gqlgen's own code kept as extensions.reason (our
//     scalars return *domain.Error, so argument coercion lands above), and
//     its message tidied: these messages quote the request back. The one
//     exception is a persisted-query miss, which keeps the code
//     PERSISTED_QUERY_NOT_FOUND: it is no bad input but the protocol's
//     request to send the text, and clients' persisted-query links match
//     that code to retry with the full query;
//   - anything else is an internal fault: logged with its cause and shown
//     only as "internal error", so no SQL, address or stack ever leaks.
func PresentErrors(log *slog.Logger) graphql.ErrorPresenterFunc {
	return func(ctx context.Context, err error) *gqlerror.Error {
		out := graphql.DefaultErrorPresenter(ctx, err)
		var de *domain.Error
		if errors.As(err, &de) {
			out.Message = capMessage(de.Message)
			out.Extensions = domainExtensions(de)
			return out
		}
		var ge *gqlerror.Error
		if errors.As(err, &ge) && ge.Err == nil {
			if ge.Extensions["code"] == PersistedQueryNotFound {
				out.Extensions = map[string]any{"code": PersistedQueryNotFound}
				return out
			}
			ext := map[string]any{"code": string(domain.CodeBadInput)}
			if r, ok := ge.Extensions["reason"]; ok { // presented already (ShapeError)
				ext["reason"] = r
			} else if c, ok := ge.Extensions["code"]; ok {
				ext["reason"] = c
			}
			if n, ok := ge.Extensions["cut"]; ok { // errors cut (capErrors)
				ext["cut"] = n
			}
			out.Message = requestMessage(out.Message)
			if m, ok := variableMessage(out.Message, out.Path); ok {
				out.Message = m
			} else if m, ok := variableTypeMessage(ctx, out.Message, out.Path); ok {
				out.Message = m
			}
			out.Extensions = ext
			return out
		}
		if errors.Is(err, context.Canceled) {
			return &gqlerror.Error{Message: "request cancelled", Path: out.Path, Extensions: map[string]any{"code": string(domain.CodeInternal)}}
		}
		log.ErrorContext(ctx, "internal error", "err", err, "path", out.Path.String())
		return &gqlerror.Error{Message: "internal error", Path: out.Path, Extensions: map[string]any{"code": string(domain.CodeInternal)}}
	}
}

// PersistedQueryNotFound is the code of an automatic persisted query
// whose hash the service does not know (gqlgen's, and the one Apollo's
// and urql's persisted-query links look for before they resend the
// operation with its text).
const PersistedQueryNotFound = "PERSISTED_QUERY_NOT_FOUND"

// domainExtensions maps a domain error's code (and details) to the
// contract's extensions.
func domainExtensions(de *domain.Error) map[string]any {
	ext := map[string]any{"code": string(de.Code)}
	if de.Field != "" {
		ext["field"] = de.Field
	}
	if de.Code == domain.CodeRateLimited {
		ext["retryAfterMs"] = max(de.RetryAfter.Milliseconds(), 1)
	}
	return ext
}

// OperationError is a domain error raised before execution (by an
// extension). It is presented here already, because gqlgen's websocket
// transport sends such errors as they are, bypassing the presenter; over
// HTTP the presenter finds the same domain error inside and agrees.
func OperationError(de *domain.Error) *gqlerror.Error {
	return &gqlerror.Error{Message: capMessage(de.Message), Err: de, Extensions: domainExtensions(de)}
}

// BadBodyMessage replaces gqlgen's JSON-decoding message, which names Go
// types and quotes the whole body back.
const BadBodyMessage = "request body must be a JSON object with a query string"

// requestMessage tidies gqlgen's message about a malformed request.
func requestMessage(msg string) string {
	if strings.HasPrefix(msg, "json request body could not be decoded") {
		return BadBodyMessage
	}
	// gqlgen appends the raw body to some messages.
	if i := strings.Index(msg, " body:"); i >= 0 {
		msg = msg[:i]
	}
	return capMessage(msg)
}

// variableMessage rewrites gqlparser's message for a variable, or a
// field of an input variable, of type Int whose JSON value is not an
// integer (1e300, 2.5, past 64 bits, a string): it says "cannot use value
// 0 as Int", quoting the 0 its failed conversion left, or "cannot use
// string as Int" for a number inside an input object, which tell the
// client nothing.
func variableMessage(msg string, path ast.Path) (string, bool) {
	if !strings.HasPrefix(msg, "cannot use ") || !strings.HasSuffix(msg, " as Int") ||
		len(path) < 2 || path[0] != ast.PathName("variable") {
		return "", false
	}
	return capMessage(fmt.Sprintf("variable $%s must be an integer, written in digits without a fraction or an exponent", variablePath(path[1:]))), true
}

// maxMessageLen bounds an error message: validation messages quote field,
// argument and operation names, which a client may make 60 KB long.
const (
	maxMessageLen = 200
	maxQuotedLen  = 40
)

var (
	longQuoted = regexp.MustCompile(fmt.Sprintf(`"[^"]{%d,}"`, maxQuotedLen+1))
	longWord   = regexp.MustCompile(fmt.Sprintf(`[^\s"]{%d,}`, maxQuotedLen+1))
)

// capMessage shortens long names first (quoted, or bare like gqlgen's
// "operation X not found"), so the message keeps its sense, then cuts
// whatever is still too long. Short messages (all of ours) cost one
// length check.
func capMessage(msg string) string {
	if len(msg) <= maxMessageLen {
		return msg
	}
	msg = longQuoted.ReplaceAllStringFunc(msg, func(q string) string {
		return truncate(q[:len(q)-1], maxQuotedLen) + `"`
	})
	msg = longWord.ReplaceAllStringFunc(msg, func(w string) string { return truncate(w, maxQuotedLen) })
	return truncate(msg, maxMessageLen)
}

// TruncateName shortens a name a client chose (an operation id, a
// field's response key) before a message quotes it.
func TruncateName(s string) string { return truncate(s, maxQuotedLen) }

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// RecoverPanic turns a resolver panic into an internal error and logs it.
func RecoverPanic(log *slog.Logger) graphql.RecoverFunc {
	return func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "resolver panic", "panic", fmt.Sprint(p))
		return errors.New("internal error")
	}
}

// ShapeError is a refusal of the request's shape: BAD_USER_INPUT with the
// reason, like gqlgen's own limits. It carries the contract's code itself
// rather than rely on the presenter: gqlgen's websocket transport sends
// the error objects an extension returned, which are presented only
// because the presenter happens to edit them in place.
func ShapeError(reason, format string, args ...any) *gqlerror.Error {
	return &gqlerror.Error{
		Message:    fmt.Sprintf(format, args...),
		Extensions: map[string]any{"code": string(domain.CodeBadInput), "reason": reason},
	}
}
