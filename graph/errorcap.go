package graph

import (
	"context"
	"fmt"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/validator/core"
	"github.com/vektah/gqlparser/v2/validator/rules"

	"flashsale/domain"
)

// maxErrors bounds the errors one answer reports. A client needs the
// first few to fix its request; a document of 990 unknown directives
// (5 KB) made gqlparser report 1,979 errors, a 345 KB answer, built and
// presented one by one. Past the bound one last error says how many were
// cut (extensions.cut), so a client still learns that there were more.
const maxErrors = 50

// maxValidationErrors bounds the errors one validation builds: a wrong
// document's first few errors are what its author needs, and each one
// built quotes names the client chose (600 characters each, measured), so
// past these the rest are only counted.
const maxValidationErrors = 10

// cutReason is the extensions.reason of the error that stands for the
// errors cut from an answer.
const cutReason = "TOO_MANY_ERRORS"

// CappedValidationRules returns gqlparser's default rules, each wrapped so
// that one validation builds at most maxValidationErrors errors and one that counts
// the rest: an error past the bound is counted, never built (its message,
// which quotes names, is never formatted). The returned function is
// called once per validation (gqlgen's validation rules hook), so the
// count is that document's.
//
// Without suggestions, the rules that would add "Did you mean ...?" to an
// unknown name's error are gqlparser's variants without them: a
// suggestion is an edit distance from the unknown name to every known
// one, and a document of long unknown names made each validation cost
// tens of milliseconds. Suggestions are for a developer at a local
// playground (embedded mode), never for anyone who can reach a real node.
func CappedValidationRules(suggestions bool) func() *rules.Rules {
	return func() *rules.Rules {
		c := &validationCap{}
		out := rules.NewRules()
		for name, fn := range rules.NewDefaultRules().GetInner() {
			if !suggestions {
				if quiet, ok := withoutSuggestions[name]; ok {
					fn = quiet.RuleFunc
				}
			}
			out.AddRule(name, c.wrap(fn))
		}
		return out
	}
}

// withoutSuggestions are gqlparser's rules that suggest names, by the
// name of the default rule each replaces. gqlgen's executor puts the
// default rule back only where no rule of that name is present, so these
// stay in place under the default names.
var withoutSuggestions = map[string]core.Rule{
	rules.FieldsOnCorrectTypeRule.Name: rules.FieldsOnCorrectTypeRuleWithoutSuggestions,
	rules.KnownArgumentNamesRule.Name:  rules.KnownArgumentNamesRuleWithoutSuggestions,
	rules.KnownTypeNamesRule.Name:      rules.KnownTypeNamesRuleWithoutSuggestions,
	rules.ScalarLeafsRule.Name:         rules.ScalarLeafsRuleWithoutSuggestions,
	rules.ValuesOfCorrectTypeRule.Name: rules.ValuesOfCorrectTypeRuleWithoutSuggestions,
}

// validationCap counts one validation's errors.
type validationCap struct {
	n      int
	marker *gqlerror.Error // the error that stands for those cut
}

func (c *validationCap) wrap(fn core.RuleFunc) core.RuleFunc {
	return func(observers *core.Events, addError core.AddErrFunc) {
		fn(observers, func(options ...core.ErrorOption) {
			c.n++
			switch {
			case c.n <= maxValidationErrors:
				addError(options...)
			case c.marker == nil:
				addError(func(e *gqlerror.Error) {
					e.Extensions = map[string]any{"reason": cutReason}
					c.marker = e
				})
				fallthrough
			default:
				// The message is rewritten as the count grows: the rules
				// have no "done" event, and the marker is read only after
				// the walk.
				cut := c.n - maxValidationErrors
				c.marker.Message = cutMessage(cut, maxValidationErrors)
				c.marker.Extensions["cut"] = cut
			}
		})
	}
}

func cutMessage(cut, kept int) string {
	return fmt.Sprintf("%d more errors were cut: an answer reports at most %d", cut, kept)
}

// ErrorCap bounds the errors of every answer gqlgen writes (validation
// errors, which CappedValidationRules already bounds, and errors raised
// while executing): the first maxErrors are kept, and one more error
// says how many were cut, with the code of the first cut error.
type ErrorCap struct{}

var _ interface {
	graphql.HandlerExtension
	graphql.ResponseInterceptor
} = ErrorCap{}

func (ErrorCap) ExtensionName() string                   { return "ErrorCap" }
func (ErrorCap) Validate(graphql.ExecutableSchema) error { return nil }

func (ErrorCap) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	resp := next(ctx)
	if resp != nil {
		resp.Errors = capErrors(resp.Errors)
	}
	return resp
}

// capErrors keeps the first maxErrors errors of list and adds one that
// counts the rest; a list that ends with such an error already (from
// validation) is left as it is.
func capErrors(list gqlerror.List) gqlerror.List {
	if len(list) <= maxErrors || (len(list) == maxErrors+1 && isCutMarker(list[maxErrors])) {
		return list
	}
	rest := list[maxErrors:]
	cut := len(rest)
	if last := rest[len(rest)-1]; isCutMarker(last) {
		n, _ := last.Extensions["cut"].(int)
		cut += n - 1
	}
	code, _ := rest[0].Extensions["code"].(string)
	if code == "" {
		code = string(domain.CodeBadInput)
	}
	out := make(gqlerror.List, maxErrors, maxErrors+1)
	copy(out, list)
	return append(out, &gqlerror.Error{
		Message:    cutMessage(cut, maxErrors),
		Extensions: map[string]any{"code": code, "reason": cutReason, "cut": cut},
	})
}

func isCutMarker(e *gqlerror.Error) bool {
	return e != nil && e.Extensions["reason"] == cutReason
}
