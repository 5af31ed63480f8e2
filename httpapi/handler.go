package httpapi

import (
	"cmp"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"go.opentelemetry.io/otel/trace"

	"flashsale/domain"
	"flashsale/graph"
	"flashsale/internal/auth"
	"flashsale/internal/tracing"
)

// Limits bound what one request may cost. Zero values take the defaults.
type Limits struct {
	// MaxBodyBytes caps a POST body (http.MaxBytesHandler) and a GET
	// request's URL query string.
	MaxBodyBytes int64
	// MaxTokens caps the lexer's token count before parsing.
	MaxTokens int
	// MaxComplexity bounds an operation's cost in points, checked before
	// it runs (MAX_REQUEST_COST): 1 per field, lists (connections) times
	// their page size, texts by the longest stored (see graph.Complexity),
	// so that the cost follows the work and the answer's size.
	MaxComplexity int
	// MaxAnswerBytes caps one answer (MAX_RESPONSE_BYTES): an answer
	// that would be larger is replaced by one BAD_USER_INPUT error and
	// stops fetching once past the cap, so no request makes the node
	// buffer more than about this much.
	MaxAnswerBytes int64
	// MaxDepth caps field nesting; MaxIntrospectionDepth that of __schema
	// and __type.
	MaxDepth              int
	MaxIntrospectionDepth int
	// MaxIntrospectionFields caps the fields of an introspection
	// operation's answer, priced against the schema before it runs (see
	// graph.NewIntrospectionAnswers).
	MaxIntrospectionFields int
}

// MaxComplexityDefault is the default cap of one request's cost: what
// one request may cost the node, at most about 5 ms of CPU and 1 MB
// allocated (BenchmarkRequestCosts): a page of 75 vouchers with every
// field and short texts, or of 100 with ten fields.
const MaxComplexityDefault = 2500

// MaxAnswerBytesDefault is the default answer-size cap: a page of 100
// vouchers with texts of the longest allowed is about 0.8 MB, so five such
// pages fit.
const MaxAnswerBytesDefault = 4 << 20

func (l Limits) withDefaults() Limits {
	l.MaxBodyBytes = cmp.Or(l.MaxBodyBytes, 64<<10)
	l.MaxTokens = cmp.Or(l.MaxTokens, 2000)
	l.MaxComplexity = cmp.Or(l.MaxComplexity, MaxComplexityDefault)
	l.MaxAnswerBytes = cmp.Or(l.MaxAnswerBytes, MaxAnswerBytesDefault)
	l.MaxDepth = cmp.Or(l.MaxDepth, 10)
	l.MaxIntrospectionDepth = cmp.Or(l.MaxIntrospectionDepth, 20)
	l.MaxIntrospectionFields = cmp.Or(l.MaxIntrospectionFields, graph.MaxIntrospectionFieldsDefault)
	return l
}

// HandlerOptions configures the /query handler.
type HandlerOptions struct {
	Tokens *auth.Tokens
	Log    *slog.Logger
	Limits Limits
	// Introspection says who may ask __schema and __type (INTROSPECTION);
	// the zero value is graph.IntrospectionOff.
	Introspection graph.IntrospectionMode
	// PingInterval is how often a websocket client is pinged; a client that
	// misses two pongs is disconnected. Legacy graphql-ws clients, which
	// have no ping, get a keepalive message as often.
	PingInterval time.Duration
	// WebsocketMaxOperations bounds the operations running at once on one
	// websocket (WS_MAX_OPERATIONS); one more gets a RATE_LIMITED error for
	// that operation alone. WebsocketWriteTimeout bounds each write to a
	// websocket; a client that does not read in time is disconnected.
	WebsocketMaxOperations int
	WebsocketWriteTimeout  time.Duration
	// WebsocketSubscribesPerSec is the rate of operations one websocket
	// may start (WS_SUBSCRIBES_PER_SEC), after a burst of
	// WebsocketMaxOperations or a second's worth; over it an operation
	// gets RATE_LIMITED, and a socket that goes on is closed with 4429
	// (see subscribeRate).
	WebsocketSubscribesPerSec int
	// WebsocketMaxUninitialized caps the websockets accepted on this node
	// that have not sent connection_init (WS_MAX_UNINITIALIZED); one more
	// handshake is answered 503 before the upgrade.
	WebsocketMaxUninitialized int
	// WebsocketMaxPerUser and WebsocketMaxPerIP cap the websockets open at
	// once per user (WS_MAX_PER_USER) and per client address
	// (WS_MAX_PER_IP); one more is closed with 4429. See socketCaps.
	WebsocketMaxPerUser int
	WebsocketMaxPerIP   int
	// IPLimit, if set, limits the requests of each client IP (grabs are
	// limited in their voucher actor instead), before they are parsed.
	IPLimit IPLimiter
	// FloodPerSec is the in-process per-IP limit (SHED_IP_PER_SEC) every
	// request passes before it is parsed (see floodShedder): 0 takes
	// FloodPerSecDefault, a negative value turns it off.
	FloodPerSec int
	// Anonymous bounds the requests without a valid token (see
	// AnonymousBudget, whose zero fields take their defaults).
	Anonymous AnonymousBudget
	// Suggestions adds "Did you mean ...?" to the errors of unknown names
	// (embedded mode only: see graph.CappedValidationRules).
	Suggestions bool
	// Budget, if set, is each caller's budget of request cost (see
	// CostBudget).
	Budget CostBudget
	// Shed configures shedding non-core operations under grab load (see
	// LoadShedding, whose zero thresholds take their defaults).
	Shed LoadShedding
	// CORSOrigins are the origins whose pages may call /query
	// (CORS_ALLOWED_ORIGINS): "*", or scheme://host[:port] with at most
	// one "*" (see CheckOrigin). They also decide a websocket's Origin.
	// Empty: no CORS headers, websockets from their own origin only.
	CORSOrigins []string
	// CompiledGrabs answers grab documents on the compiled path
	// (GRAPHQL_COMPILED_GRABS; see compiledGrabs): the same answers as
	// gqlgen's, for a fraction of the CPU.
	CompiledGrabs bool
	// Traces, if set, traces every operation (otelgqlgen: the operation
	// and each resolver's field; the compiled path's grabs alike) under
	// the caller's traceparent, if it sends one. Nil: nothing is
	// installed.
	Traces trace.TracerProvider
}

// NewHandler returns the /query handler: websocket first (so an upgrade is
// never mistaken for a GET query), then POST and GET, behind a guard that
// answers unsupported requests itself; every operation is authorized as a
// whole before it runs, bounded, and its errors presented by
// graph.PresentErrors. In front of the guard, a client over its
// in-process allowance is refused before anything is read, and a
// connection collecting refusals is closed (refusalEdge: serve /query with
// ConnContext for that). In front of all, when origins are configured, the
// CORS policy answers preflights and marks every answer (corsEdge).
func NewHandler(r *graph.Resolver, opts HandlerOptions) http.Handler {
	lim := opts.Limits.withDefaults()
	opts.PingInterval = cmp.Or(opts.PingInterval, 10*time.Second)
	present := graph.PresentErrors(opts.Log)
	es := graph.NewExecutableSchema(graph.Config{Resolvers: r, Complexity: graph.Complexity(func() domain.TextSizes { return r.Catalog.TextSizes() })})
	srv := handler.New(es)
	flood := newFloodShedder(cmp.Or(opts.FloodPerSec, FloodPerSecDefault))
	policy := newCORS(opts.CORSOrigins)
	srv.AddTransport(websocketTransport{
		Websocket: transport.Websocket{
			PingPongInterval: opts.PingInterval,
			// The legacy graphql-ws subprotocol has no ping/pong; its "ka"
			// messages at least keep proxies from closing an idle socket.
			KeepAlivePingInterval: opts.PingInterval,
			InitTimeout:           10 * time.Second,
			InitFunc:              wsAuthenticate(opts.Tokens),
			// A message is an operation like a POST body, and is bounded
			// like one (gqlgen's default is 1 MB).
			PayloadReadLimit: &lim.MaxBodyBytes,
		},
		maxOps:       cmp.Or(max(opts.WebsocketMaxOperations, 0), WebsocketMaxOperationsDefault),
		subscribes:   cmp.Or(max(opts.WebsocketSubscribesPerSec, 0), WebsocketSubscribesPerSecDefault),
		writeTimeout: cmp.Or(max(opts.WebsocketWriteTimeout, 0), WebsocketWriteTimeoutDefault),
		handshake: handshakeAdmission{
			caps: newSocketCaps(cmp.Or(max(opts.WebsocketMaxPerIP, 0), WebsocketMaxPerIPDefault),
				cmp.Or(max(opts.WebsocketMaxPerUser, 0), WebsocketMaxPerUserDefault),
				cmp.Or(max(opts.WebsocketMaxUninitialized, 0), WebsocketMaxUninitializedDefault)),
			flood:   flood,
			ipLimit: opts.IPLimit,
			log:     opts.Log,
		},
		origins: websocketOrigins{policy: policy},
	})
	srv.AddTransport(transport.Options{})
	srv.AddTransport(graphQLOverHTTP{})
	queries := newQueryCache()
	srv.SetQueryCache(queries)
	srv.SetParserTokenLimit(lim.MaxTokens)
	srv.SetErrorPresenter(present)
	srv.SetValidationRulesFn(graph.CappedValidationRules(opts.Suggestions))
	srv.SetRecoverFunc(graph.RecoverPanic(opts.Log))
	persisted := newPersistedCache()
	if opts.Traces != nil {
		// First: the operation's span covers every extension's work.
		srv.Use(operationTracer(opts.Traces))
	}
	srv.Use(extension.AutomaticPersistedQuery{Cache: persisted})
	// After the persisted-query extension, which fills in the text a hash
	// names: admission must see the text the executor will parse.
	srv.Use(admission{
		cache:   queries,
		flood:   flood,
		ipLimit: opts.IPLimit,
		shed:    newLoadShedder(opts.Shed.withDefaults()),
		shape:   newShapeLimits(lim),
		tokens:  lim.MaxTokens,
		log:     opts.Log,

		introspection: cmp.Or(opts.Introspection, graph.IntrospectionOff),
	})
	srv.Use(&graph.StrictEnums{})
	srv.Use(graph.OperationPolicy{})
	srv.Use(extension.FixedComplexityLimit(lim.MaxComplexity))
	refused := newRefusedCallers()
	var charge costCharge
	if opts.Budget != nil {
		// After the complexity limit, which prices the operation; before
		// the introspection answers, whose charge it reports, and the
		// answer cap, which counts what the answer actually cost.
		charge = costCharge{budget: opts.Budget, refused: refused, log: opts.Log, away: new(atomic.Int64)}
		srv.Use(charge)
	}
	srv.Use(depthLimit{max: lim.MaxDepth, introspectionMax: lim.MaxIntrospectionDepth})
	srv.Use(graph.NewIntrospectionAnswers(lim.MaxIntrospectionFields, cmp.Or(opts.Introspection, graph.IntrospectionOff)))
	if opts.Budget != nil {
		// After the introspection answers, which price an introspection
		// operation by its answer's fields.
		srv.Use(costPricing{charge})
	}
	srv.Use(graph.NewAnswerCap(lim.MaxAnswerBytes))
	srv.Use(graph.ErrorCap{})
	var fast *compiledGrabs
	if opts.CompiledGrabs {
		fast = newCompiledGrabs(es, r.Seckill, opts.Tokens, present, graph.RecoverPanic(opts.Log), flood, lim, persisted)
		if opts.Traces != nil {
			fast.tracer = opts.Traces.Tracer(tracing.Name)
		}
	}
	var h http.Handler = requestGuard{
		next: http.MaxBytesHandler(withClientIP(opts.Tokens.Middleware(budgetGate{refused: refused, present: present,
			next: anonymousGate{next: srv, budget: newAnonymousBudget(opts.Anonymous.WithDefaults()), present: present}})), lim.MaxBodyBytes),
		fast:        fast,
		present:     present,
		maxURLQuery: int(lim.MaxBodyBytes),
		maxBody:     lim.MaxBodyBytes,
		maxTokens:   lim.MaxTokens,
		persisted:   persisted,
	}
	if opts.Traces != nil {
		h = traceparentEdge{next: h}
	}
	h = refusalEdge{next: h, flood: flood}
	if policy != nil {
		h = corsEdge{policy: policy, next: h, flood: flood}
	}
	return h
}
