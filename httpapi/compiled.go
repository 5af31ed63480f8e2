package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"
	"go.opentelemetry.io/otel/trace"

	"flashsale/domain"
	"flashsale/graph"
	"flashsale/graph/model"
	"flashsale/internal/admitcache"
	"flashsale/internal/auth"
	"flashsale/internal/metrics"
)

// compiledGrabs answers the grab documents clients actually send (one
// seckillVoucher mutation selecting some of code, orderId, message and
// __typename, its arguments as variables or literals) without gqlgen's
// request decoding, operation context, variable coercion, extension chain
// and field marshalling: a document is parsed and validated once, against
// the schema and every limit the handler applies, into a grabPlan; a
// request naming it (by text, or by the hash of an automatic persisted
// query) is then one JSON decode, the checks gqlgen's extensions would run
// for a grab (flood limit, token), the grab use case through the field's
// own mapping (graph.Grab, which the resolver calls too), and the answer
// written straight into a buffer.
//
// The answer is byte for byte what gqlgen answers for the same request
// (status, headers, body): TestCompiledGrabAnswersAsGqlgen compares them
// for every code, error and selection. Anything the plan does not cover
// exactly (another operation, fragments, directives, variable defaults, a
// variable of an unexpected JSON type, a value the ID scalar refuses, a
// persisted query being registered) is left untouched to gqlgen, before
// anything has been counted or charged, so it is answered as it always
// was.
type compiledGrabs struct {
	schema  *ast.Schema
	grabs   graph.Seckill
	tokens  *auth.Tokens
	present graphql.ErrorPresenterFunc
	recover graphql.RecoverFunc
	flood   *floodShedder // nil: off
	lim     Limits
	// persisted is the automatic-persisted-query cache gqlgen's extension
	// fills: a hash-only request names its text there.
	persisted graphql.Cache[string]
	// plans maps a document's text to its plan, or to nil for a text that
	// is not a plain grab, so that neither is parsed twice. last is the
	// plan used last, compared with a request's string token in place,
	// without decoding it: in a sale, clients send one document.
	plans *admitcache.Cache[*grabPlan]
	last  atomic.Pointer[textPlan]
	// tracer, if set, traces each grab as gqlgen's operationTracer would
	// (traceGrab).
	tracer trace.Tracer
}

// textPlan is a plan with the string token (quotes and escapes as sent)
// its text last came in: a client's pretty-printed document holds
// escapes, and comparing the token needs no decoding.
type textPlan struct {
	tok  string
	plan *grabPlan
}

// compiledServed counts the answers the compiled path wrote; grab_total
// less this is what went through gqlgen (or was refused before a grab).
var compiledServed = metrics.Counter("graphql_compiled_grabs_total", "Grabs answered on the compiled path (GRAPHQL_COMPILED_GRABS) instead of gqlgen's executor.")

// compiledMaxText bounds the documents compiled: a grab document is a few
// hundred bytes; a longer one goes to gqlgen, so a client cannot make the
// plan cache hold large texts.
const compiledMaxText = 2048

// grabMarker and persistedMarker are what a body must contain to be worth
// decoding here: a grab's text, or the hash of a persisted one.
var (
	grabMarker      = []byte(graph.GrabField)
	persistedMarker = []byte("persistedQuery")
)

func newCompiledGrabs(es graphql.ExecutableSchema, grabs graph.Seckill, tokens *auth.Tokens, present graphql.ErrorPresenterFunc, rec graphql.RecoverFunc, flood *floodShedder, lim Limits, persisted graphql.Cache[string]) *compiledGrabs {
	plans := admitcache.New("plans", planCacheBytes, planWeight)
	return &compiledGrabs{schema: es.Schema(), grabs: grabs, tokens: tokens, present: present, recover: rec, flood: flood, lim: lim, persisted: persisted, plans: plans}
}

// persistedParams is a body that names a persisted query by its hash,
// read with encoding/json (as gqlgen reads it: the same struct tags,
// case-insensitive, the last duplicate wins); this shape is rare enough
// not to need scanGrabBody's speed.
type persistedParams struct {
	Query         string                     `json:"query"`
	OperationName string                     `json:"operationName"`
	Variables     map[string]json.RawMessage `json:"variables"`
	Extensions    *struct {
		PersistedQuery *struct {
			Version int    `json:"version"`
			Hash    string `json:"sha256Hash"`
		} `json:"persistedQuery"`
	} `json:"extensions"`
}

var grabBodyPool = sync.Pool{New: func() any { return new(grabBody) }}

// serve answers a POST body (read whole by the request guard) if a plan
// covers it, and reports whether it did. When it does not, it has changed
// and charged nothing, and the guard hands the request to gqlgen. A body
// it answers was scanned whole as valid JSON.
func (c *compiledGrabs) serve(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if !bytes.Contains(body, grabMarker) && !bytes.Contains(body, persistedMarker) {
		return false
	}
	gb := grabBodyPool.Get().(*grabBody)
	defer func() {
		gb.reset()
		grabBodyPool.Put(gb)
	}()
	ctx := auth.WithRemoteAddr(r.Context(), r.RemoteAddr)
	if h := r.Header.Get("Authorization"); h != "" {
		ctx = c.tokens.WithHeader(ctx, h)
	}
	var plan *grabPlan
	if scanGrabBody(body, gb) {
		if gb.queryTok == nil {
			return false
		}
		plan = c.planFor(ctx, gb)
	} else {
		gb.reset() // what the scan read before it gave up
		if plan = c.persistedPlan(ctx, body, gb); plan == nil {
			return false
		}
	}
	if plan == nil || (gb.opName != "" && gb.opName != plan.name) {
		return false
	}
	args, ok := plan.args(gb)
	if !ok {
		return false
	}
	c.run(ctx, w, r, plan, args)
	return true
}

// planFor returns the plan of the body's text: the last plan when the
// text is the same bytes, else the cache's (compiling it the first time).
func (c *compiledGrabs) planFor(ctx context.Context, gb *grabBody) *grabPlan {
	if last := c.last.Load(); last != nil && string(gb.queryTok) == last.tok {
		return last.plan
	}
	text, ok := decodeString(gb.queryTok, gb.escaped)
	if !ok {
		return nil
	}
	plan := c.plan(ctx, text)
	if plan != nil {
		c.last.Store(&textPlan{tok: string(gb.queryTok), plan: plan})
	}
	return plan
}

// persistedPlan reads a body that names a registered persisted query by
// its hash alone, filling gb's operation name and variables. Registering
// one (text and hash) is gqlgen's, and so is a body of any other shape.
func (c *compiledGrabs) persistedPlan(ctx context.Context, body []byte, gb *grabBody) *grabPlan {
	if c.persisted == nil || !bytes.Contains(body, persistedMarker) {
		return nil
	}
	var p persistedParams
	if json.Unmarshal(body, &p) != nil || p.Query != "" || p.Extensions == nil || p.Extensions.PersistedQuery == nil || p.Extensions.PersistedQuery.Version != 1 {
		return nil
	}
	text, ok := c.persisted.Get(ctx, p.Extensions.PersistedQuery.Hash)
	if !ok {
		return nil
	}
	gb.opName = p.OperationName
	for name, raw := range p.Variables {
		gb.vars = append(gb.vars, rawVar{name: []byte(name), raw: raw})
	}
	return c.plan(ctx, text)
}

// run answers a grab the plan covers: the checks of admission and
// graph.OperationPolicy that apply to a grab, in their order, then the
// field (graph.Grab).
func (c *compiledGrabs) run(ctx context.Context, w http.ResponseWriter, r *http.Request, plan *grabPlan, args grabArgs) {
	compiledServed.Inc()
	ct := responseContentType(r)
	if c.flood != nil {
		if ok, wait := c.flood.allow(auth.ClientIP(ctx)); !ok {
			shedTotal.WithLabelValues("flood").Inc()
			c.writeErrors(ctx, w, r, ct, nil, graph.OperationError(domain.RateLimited(wait)))
			return
		}
	}
	if _, err := auth.FromContext(ctx); err != nil {
		c.writeErrors(ctx, w, r, ct, nil, graph.OperationError(graph.AsDomainError(err)))
		return
	}
	end := untraced
	if c.tracer != nil {
		ctx, end = c.traceGrab(ctx, plan)
	}
	res, panicked, err := c.resolve(ctx, args)
	end(err)
	if err != nil || res == nil {
		switch {
		case res == nil && err == nil:
			err = errors.New("must not be null")
		case !panicked: // gqlgen locates a resolver's error at its field
			err = plan.locate(err)
		}
		c.writeErrors(ctx, w, r, ct, ast.Path{ast.PathName(plan.key)}, err)
		return
	}
	buf := answerPool.Get().(*bytes.Buffer)
	defer answerPool.Put(buf)
	out, err := plan.answer(buf, res)
	if err != nil {
		c.writeErrors(ctx, w, r, ct, ast.Path{ast.PathName(plan.key)}, err)
		return
	}
	w.Header()["Content-Type"] = ct
	_, _ = w.Write(out)
}

// answer is the whole body of a grab's answer, as gqlgen writes it:
// json.Marshal of a graphql.Response whose data is the field set. The
// field set's bytes are that envelope's unless they hold a character
// encoding/json escapes (the messages we write hold none), so the
// envelope is written around them directly, and built by json.Marshal
// only in that case.
func (p *grabPlan) answer(buf *bytes.Buffer, res *model.SeckillResult) ([]byte, error) {
	const open = `{"data":`
	buf.Reset()
	buf.WriteString(open)
	p.render(buf, res)
	buf.WriteByte('}')
	out := buf.Bytes()
	if data := out[len(open) : len(out)-1]; needsHTMLEscape(data) {
		b, err := json.Marshal(graphql.Response{Data: bytes.Clone(data)})
		if err != nil {
			return nil, fmt.Errorf("marshal the answer: %w", err)
		}
		return b, nil
	}
	return out, nil
}

var answerPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// resolve answers the field as the resolver does (graph.Grab), turning a
// panic into the error gqlgen's recover function gives.
func (c *compiledGrabs) resolve(ctx context.Context, args grabArgs) (res *model.SeckillResult, panicked bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, panicked, err = nil, true, c.recover(ctx, p)
		}
	}()
	res, err = graph.Grab(ctx, c.grabs, args.voucherID, args.requestID, args.ticket)
	return res, false, err
}

// locate attaches the grab field's place in the document to a resolver
// error, as graphql.AddFieldLocationToError does.
func (p *grabPlan) locate(err error) error {
	if p.line == 0 {
		return err
	}
	loc := gqlerror.Location{Line: p.line, Column: p.column}
	var gqlErr *gqlerror.Error
	if errors.As(err, &gqlErr) {
		if gqlErr.Locations == nil {
			gqlErr.Locations = []gqlerror.Location{loc}
		}
		return err
	}
	wrapped := gqlerror.WrapPath(ast.Path{ast.PathName(p.key)}, err)
	wrapped.Locations = []gqlerror.Location{loc}
	return wrapped
}

// writeErrors answers one error as gqlgen's transport (graphQLOverHTTP)
// does: through the error presenter, on the grab's path when it came from
// the resolver (so data is null, the field being non-null), or on no path
// and as a request error when the operation was refused before it ran.
func (c *compiledGrabs) writeErrors(ctx context.Context, w http.ResponseWriter, r *http.Request, contentType []string, path ast.Path, err error) {
	var gqlErr *gqlerror.Error
	switch {
	case path == nil:
		errs := gqlerror.List{c.present(ctx, err)}
		writeGraphQLErrors(w, r, contentType, requestErrorStatus(contentType[0], errs), false, &graphql.Response{Errors: errs})
		return
	case errors.As(err, &gqlErr):
		if gqlErr.Path == nil {
			gqlErr.Path = path
		}
	default:
		err = gqlerror.WrapPath(path, err)
	}
	errs := gqlerror.List{c.present(ctx, err)}
	setRetryAfter(w.Header(), errs)
	b, mErr := json.Marshal(graphql.Response{Errors: errs})
	if mErr != nil {
		b = []byte(`{"errors":[{"message":"internal error","extensions":{"code":"INTERNAL"}}],"data":null}`)
	}
	w.Header()["Content-Type"] = contentType
	_, _ = w.Write(b)
}

// needsHTMLEscape reports bytes that encoding/json escapes in a raw
// message: <, >, & and the line and paragraph separators U+2028, U+2029.
func needsHTMLEscape(b []byte) bool {
	for i, c := range b {
		switch c {
		case '<', '>', '&':
			return true
		case 0xE2:
			if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
				return true
			}
		}
	}
	return false
}

// responseContentType is the Content-Type /query answers in for the
// request's Accept header (as gqlgen's transports chose it: the first
// type named that it speaks, application/json for a wildcard or no
// Accept), as a header value shared by every answer (net/http only reads
// it), so that setting it allocates nothing. A request that accepts
// neither type is refused 406 by the request guard (acceptable); its
// refusal is in application/json.
func responseContentType(r *http.Request) []string {
	ct, _ := negotiate(r.Header.Get("Accept"))
	return ct
}

// acceptable reports an Accept header that names a media type /query
// answers in, or a wildcard covering one, or no Accept at all; otherwise
// the answer is 406 (GraphQL over HTTP: a server SHOULD answer 406 when
// it cannot answer in an accepted type).
func acceptable(accept string) bool {
	_, ok := negotiate(accept)
	return ok
}

func negotiate(accept string) (contentType []string, ok bool) {
	if accept == "" {
		return plainJSON, true
	}
	for part := range strings.SplitSeq(accept, ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		if q, ok := params["q"]; ok && strings.Trim(strings.TrimSpace(q), "0.") == "" {
			continue // q=0: not acceptable
		}
		switch mediaType {
		case "*/*", "application/*", "application/json":
			return plainJSON, true
		case graphQLJSON[0]:
			return graphQLJSON, true
		}
	}
	return plainJSON, false
}

var (
	plainJSON   = []string{"application/json"}
	graphQLJSON = []string{"application/graphql-response+json"}
)

// plan returns the text's plan, compiling it the first time; nil when
// the text is not a grab document the compiled path covers.
//
// Only a caller with a valid token has a text compiled: anyone else's
// grab is refused UNAUTHENTICATED whatever its text, which gqlgen's path
// answers as well, so an anonymous client can neither fill the plan
// cache nor make the node compile.
func (c *compiledGrabs) plan(ctx context.Context, text string) *grabPlan {
	if len(text) > compiledMaxText {
		return nil
	}
	if p, ok := c.plans.Get(ctx, text); ok {
		return p
	}
	if _, err := auth.FromContext(ctx); err != nil {
		return nil
	}
	p := compileGrab(c.schema, text, c.lim)
	c.plans.Add(ctx, text, p)
	return p
}

// planWeight estimates a plan's bytes beside its text: nil (a text that
// is no plain grab) is a pointer.
func planWeight(text string, p *grabPlan) int {
	n := len(text) + 64
	if p != nil {
		n += 160 + 48*len(p.fields) + len(p.name) + len(p.key)
	}
	return n
}

// grabPlan is a compiled grab document.
type grabPlan struct {
	name string // the operation's name, "" when anonymous
	key  string // the grab's response key (its alias or seckillVoucher)
	// line and column place the grab field in the text, for errors.
	line, column int
	// fields are the selected fields of SeckillResult, in order, each
	// with its response key.
	fields []planField
	// Each argument is a literal (decided at compile time) or names a
	// variable of the operation.
	voucher   planArg
	requestID planArg
	ticket    planArg
}

type planField struct{ key, name string }

// planArg is one argument: a variable's name, or a literal value.
type planArg struct {
	variable string
	nonNull  bool // the variable's type is non-null
	id       int64
	str      *string
}

type grabArgs struct {
	voucherID int64
	requestID *string
	ticket    *string
}

// compileGrab returns the plan for a document, or nil when it is not a
// valid grab document of the covered shape, or would not pass every
// limit the handler applies to it.
func compileGrab(schema *ast.Schema, text string, lim Limits) *grabPlan {
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: text}, lim.MaxTokens)
	if err != nil || len(doc.Operations) != 1 || len(doc.Fragments) != 0 {
		return nil
	}
	if validator.Validate(schema, doc) != nil {
		return nil
	}
	op := doc.Operations[0]
	if op.Operation != ast.Mutation || len(op.Directives) != 0 || len(op.SelectionSet) != 1 {
		return nil
	}
	root, ok := op.SelectionSet[0].(*ast.Field)
	if !ok || root.Name != graph.GrabField || len(root.Directives) != 0 {
		return nil
	}
	// complexity 1 per field, depth 2, an answer of about 100 bytes a
	// field: the handler's limits, checked once here.
	if 1+len(root.SelectionSet) > lim.MaxComplexity || lim.MaxDepth < 2 || int64(100*(1+len(root.SelectionSet))) > lim.MaxAnswerBytes {
		return nil
	}
	plan := &grabPlan{name: op.Name, key: root.Alias}
	if root.Position != nil {
		plan.line, plan.column = root.Position.Line, root.Position.Column
	}
	vars := map[string]*ast.VariableDefinition{}
	for _, def := range op.VariableDefinitions {
		if def.DefaultValue != nil || len(def.Directives) != 0 {
			return nil
		}
		vars[def.Variable] = def
	}
	for _, a := range root.Arguments {
		var dst *planArg
		switch a.Name {
		case "voucherId":
			dst = &plan.voucher
		case "requestId":
			dst = &plan.requestID
		case "ticket":
			dst = &plan.ticket
		default:
			return nil
		}
		if !compileArg(a, vars, dst) {
			return nil
		}
	}
	seen := map[string]bool{}
	for _, sel := range root.SelectionSet {
		f, ok := sel.(*ast.Field)
		if !ok || len(f.Directives) != 0 || seen[f.Alias] {
			return nil // fragments, directives and merged fields: gqlgen's
		}
		switch f.Name {
		case "code", "orderId", "message", "__typename":
		default:
			return nil
		}
		seen[f.Alias] = true
		plan.fields = append(plan.fields, planField{key: f.Alias, name: f.Name})
	}
	return plan
}

// compileArg fills dst from an argument's value: a variable of the
// argument's own type, or a literal the argument's scalar accepts.
func compileArg(a *ast.Argument, vars map[string]*ast.VariableDefinition, dst *planArg) bool {
	switch a.Value.Kind {
	case ast.Variable:
		def := vars[a.Value.Raw]
		if def == nil || def.Type.Elem != nil {
			return false
		}
		want := "String"
		if a.Name == "voucherId" {
			want = "ID"
		}
		if def.Type.NamedType != want {
			return false
		}
		dst.variable, dst.nonNull = def.Variable, def.Type.NonNull
		return true
	case ast.NullValue:
		return a.Name != "voucherId"
	case ast.StringValue, ast.BlockValue:
		v := a.Value.Raw
		if a.Name == "voucherId" {
			id, err := model.UnmarshalID(v)
			dst.id = id
			return err == nil
		}
		dst.str = &v
		return true
	case ast.IntValue:
		if a.Name != "voucherId" {
			return false
		}
		v, err := a.Value.Value(nil)
		if err != nil {
			return false
		}
		id, err := model.UnmarshalID(v)
		dst.id = id
		return err == nil
	}
	return false
}

// args resolves the plan's arguments from the request's variables, as
// gqlgen coerces them; false when a value is one it would refuse or
// coerce differently (it then answers the request itself).
func (p *grabPlan) args(gb *grabBody) (grabArgs, bool) {
	var out grabArgs
	if p.voucher.variable == "" {
		out.voucherID = p.voucher.id
	} else {
		raw, ok := gb.lookup(p.voucher.variable)
		if !ok {
			return out, false
		}
		if out.voucherID, ok = idValue(raw); !ok {
			return out, false
		}
	}
	var ok bool
	if out.requestID, ok = p.requestID.string(gb); !ok {
		return out, false
	}
	if out.ticket, ok = p.ticket.string(gb); !ok {
		return out, false
	}
	return out, true
}

// string resolves a String argument: a literal, absent, or a variable
// that holds a JSON string (or null, or is missing, when it may be null).
func (a planArg) string(gb *grabBody) (*string, bool) {
	if a.variable == "" {
		return a.str, true
	}
	raw, ok := gb.lookup(a.variable)
	if !ok || string(raw) == "null" {
		return nil, !a.nonNull
	}
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false
	}
	s, ok := decodeString(raw, needsDecoding(raw))
	if !ok {
		return nil, false
	}
	return &s, true
}

// needsDecoding reports a string token with an escape or a byte outside
// ASCII.
func needsDecoding(tok []byte) bool {
	for _, c := range tok[1 : len(tok)-1] {
		if c == '\\' || c >= 0x80 {
			return true
		}
	}
	return false
}

// idValue reads an ID variable as model.UnmarshalID does (a JSON string
// or an integer, a positive decimal in its one spelling): the common
// case, plain digits, without allocating; anything else through
// UnmarshalID itself.
func idValue(raw []byte) (int64, bool) {
	digits := raw
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		digits = raw[1 : len(raw)-1]
	}
	if id, ok := canonicalID(digits); ok {
		return id, true
	}
	if len(raw) == 0 {
		return 0, false
	}
	var v any
	switch raw[0] {
	case '"':
		s, ok := decodeString(raw, needsDecoding(raw))
		if !ok {
			return 0, false
		}
		v = s
	case '1', '2', '3', '4', '5', '6', '7', '8', '9':
		v = json.Number(raw)
	default:
		return 0, false
	}
	id, err := model.UnmarshalID(v)
	return id, err == nil
}

// canonicalID parses a positive decimal without sign or leading zero that
// fits in an int64: exactly what model.UnmarshalID accepts of digits.
func canonicalID(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 || b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// render writes the grab's data object, as gqlgen's field set would.
func (p *grabPlan) render(buf *bytes.Buffer, res *model.SeckillResult) {
	buf.WriteString(`{"`)
	buf.WriteString(p.key)
	buf.WriteString(`":{`)
	for i, f := range p.fields {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteByte('"')
		buf.WriteString(f.key)
		buf.WriteString(`":`)
		switch f.name {
		case "code":
			res.Code.MarshalGQL(buf)
		case "orderId":
			if res.OrderID == nil {
				buf.WriteString("null")
			} else {
				model.MarshalID(*res.OrderID).MarshalGQL(buf)
			}
		case "message":
			graphql.MarshalString(res.Message).MarshalGQL(buf)
		case "__typename":
			graphql.MarshalString("SeckillResult").MarshalGQL(buf)
		}
	}
	buf.WriteString("}}")
}
