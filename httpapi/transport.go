package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
	"flashsale/graph"
)

// graphQLOverHTTP is gqlgen's POST and GET transports with the status
// codes of the GraphQL-over-HTTP specification, which gqlgen does not
// follow (it answers 422 to a document that does not parse or validate,
// and writes "data": null before execution has begun):
//
//   - an error raised before execution (a request error: the document,
//     its variables, or a refusal by admission or authorization) is
//     answered without a data entry, as the GraphQL specification says;
//   - with Accept application/json, such an answer is 200, except a
//     missing or invalid token, 401 (see requestErrorStatus), and a
//     request with no query, 400;
//   - with application/graphql-response+json, a request error is a 4xx
//     or 5xx by its code (see requestErrorStatus), since that media type
//     promises a data entry on every 2xx;
//   - an answer holding RATE_LIMITED carries Retry-After (setRetryAfter).
//
// The automatic-persisted-query miss is the one request error answered
// 200 with "data": null in both media types: Apollo Client's
// persisted-query link stops hashing for good when the miss comes as a
// 400, and every client's link retries on the 200.
//
// The request guard has checked what gqlgen's transports would refuse
// without a code (methods, content types, the body's JSON, a GET's
// variables), so what remains here is the protocol.
type graphQLOverHTTP struct{}

var _ graphql.Transport = graphQLOverHTTP{}

func (graphQLOverHTTP) Supports(r *http.Request) bool {
	if r.Header.Get("Upgrade") != "" {
		return false
	}
	return r.Method == http.MethodGet || (r.Method == http.MethodPost && isJSON(r.Header.Get("Content-Type")))
}

func (graphQLOverHTTP) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	ctx := r.Context()
	ct := responseContentType(r)
	start := graphql.Now()
	params, err := decodeParams(r)
	if err != nil {
		// The guard lets no such request through; kept for a handler
		// built without it.
		writeGraphQLErrors(w, r, ct, http.StatusBadRequest, false, exec.DispatchError(ctx, gqlerror.List{gqlerror.Errorf("%s", err.Error())}))
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	if params.Query == "" && !namesPersistedQuery(params.Extensions) {
		de := domain.Errorf(domain.CodeBadInput, "the request has no query: send the operation's text in \"query\"")
		writeGraphQLErrors(w, r, ct, http.StatusBadRequest, false, exec.DispatchError(ctx, gqlerror.List{{Message: de.Message, Err: de}}))
		return
	}
	oc, errs := exec.CreateOperationContext(ctx, params)
	if errs != nil {
		apqMiss := isPersistedQueryMiss(errs)
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, oc), errs)
		status := http.StatusOK
		if !apqMiss {
			status = requestErrorStatus(ct[0], resp.Errors)
		}
		writeGraphQLErrors(w, r, ct, status, apqMiss, resp)
		return
	}
	if r.Method == http.MethodGet && oc.Operation.Operation != ast.Query {
		// The guard answers these first; kept for a handler built without it.
		w.Header().Set("Allow", "POST")
		de := domain.Errorf(domain.CodeBadInput, "GET requests may only run queries")
		writeGraphQLErrors(w, r, ct, http.StatusMethodNotAllowed, false, exec.DispatchError(ctx, gqlerror.List{{Message: de.Message, Err: de}}))
		return
	}
	responses, ctx := exec.DispatchOperation(ctx, oc)
	resp := responses(ctx)
	setRetryAfter(w.Header(), resp.Errors)
	w.Header()["Content-Type"] = ct
	b, err := json.Marshal(resp)
	if err != nil {
		panic(fmt.Errorf("marshal the answer: %w", err)) // gqlgen's recover function answers it
	}
	_, _ = w.Write(b)
}

// decodeParams reads a POST body or a GET's query string as gqlgen's
// transports do (numbers kept as json.Number).
func decodeParams(r *http.Request) (*graphql.RawParams, error) {
	params := &graphql.RawParams{}
	if r.Method == http.MethodPost {
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(r.Body); err != nil {
			return nil, fmt.Errorf("the request body could not be read")
		}
		if err := jsonDecode(buf.Bytes(), params); err != nil {
			return nil, fmt.Errorf("%s", graph.BadBodyMessage)
		}
		return params, nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("the URL query string is malformed")
	}
	params.Query, params.OperationName = q.Get("query"), q.Get("operationName")
	if v := q.Get("variables"); v != "" {
		if err := jsonDecode([]byte(v), &params.Variables); err != nil {
			return nil, fmt.Errorf("variables must be a JSON object")
		}
	}
	if v := q.Get("extensions"); v != "" {
		if err := jsonDecode([]byte(v), &params.Extensions); err != nil {
			return nil, fmt.Errorf("extensions must be a JSON object")
		}
	}
	return params, nil
}

func jsonDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// namesPersistedQuery reports extensions that name an automatic
// persisted query, which stands for the query text.
func namesPersistedQuery(ext map[string]any) bool {
	_, ok := ext["persistedQuery"]
	return ok
}

// isPersistedQueryMiss reports gqlgen's persisted-query miss (its code,
// which the presenter keeps).
func isPersistedQueryMiss(errs gqlerror.List) bool {
	return len(errs) == 1 && errs[0].Extensions["code"] == graph.PersistedQueryNotFound
}

// requestErrorStatus is the status of an answer to a request error, by
// the media type and the first error's contract code (presented). A
// missing, invalid or expired token is 401 in both media types: token
// refresh in clients (Apollo's error link, urql's authExchange, any fetch
// wrapper) is keyed on it, and the specification allows a 4xx for
// application/json when there is no data; the body keeps UNAUTHENTICATED.
// Any other request error as application/json is 200.
func requestErrorStatus(contentType string, errs gqlerror.List) int {
	code := ""
	if len(errs) > 0 {
		code, _ = errs[0].Extensions["code"].(string)
	}
	if code == string(domain.CodeUnauthenticated) {
		return http.StatusUnauthorized
	}
	if contentType != graphQLJSON[0] {
		return http.StatusOK
	}
	if status, ok := requestErrorStatuses[domain.Code(code)]; ok {
		return status
	}
	return http.StatusBadRequest
}

// requestErrorStatuses are the statuses of request errors as
// application/graphql-response+json by code; any other is 400.
var requestErrorStatuses = map[domain.Code]int{
	domain.CodeForbidden:   http.StatusForbidden,
	domain.CodeRateLimited: http.StatusTooManyRequests,
	domain.CodeNotFound:    http.StatusNotFound,
	domain.CodeUnavailable: http.StatusServiceUnavailable,
	domain.CodeInternal:    http.StatusInternalServerError,
}

// requestErrors is the answer to a request error: errors and no data
// entry (graphql.Response always writes one).
type requestErrors struct {
	Errors     gqlerror.List  `json:"errors"`
	Extensions map[string]any `json:"extensions,omitempty"`
}

// writeGraphQLErrors writes an answer made of errors alone, with "data":
// null if keepData (the persisted-query miss, see graphQLOverHTTP). A 401
// carries the WWW-Authenticate every 401 must (RFC 9110 11.6.1), with
// RFC 6750's invalid_token when the request sent a token.
func writeGraphQLErrors(w http.ResponseWriter, r *http.Request, contentType []string, status int, keepData bool, resp *graphql.Response) {
	var v any = requestErrors{Errors: resp.Errors, Extensions: resp.Extensions}
	if keepData {
		v = resp
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}]}`)
	}
	setRetryAfter(w.Header(), resp.Errors)
	if status == http.StatusUnauthorized {
		challenge := `Bearer realm="flashsale"`
		if r.Header.Get("Authorization") != "" {
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
	}
	w.Header()["Content-Type"] = contentType
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// setRetryAfter sets Retry-After (whole seconds, rounded up) from the first
// RATE_LIMITED error's retryAfterMs, on any answer holding one (a request
// error or a field error): HTTP clients and proxies read the header, not
// the body. An answer without errors costs a length check.
func setRetryAfter(h http.Header, errs gqlerror.List) {
	for _, e := range errs {
		if e.Extensions["code"] != string(domain.CodeRateLimited) {
			continue
		}
		if ms, ok := e.Extensions["retryAfterMs"].(int64); ok && ms > 0 {
			h.Set("Retry-After", strconv.FormatInt((ms+999)/1000, 10))
			return
		}
	}
}

// requestErrorAnswer is writeGraphQLErrors for an error raised before
// gqlgen has the request (the guard, the compiled path's refusals): the
// error presented, in the media type asked for.
func requestErrorAnswer(ctx context.Context, w http.ResponseWriter, r *http.Request, present graphql.ErrorPresenterFunc, status int, err error) {
	ct := responseContentType(r)
	writeGraphQLErrors(w, r, ct, status, false, &graphql.Response{Errors: gqlerror.List{present(ctx, err)}})
}
