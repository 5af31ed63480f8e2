package graph

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"

	"flashsale/internal/auth"
)

// Limits bound what one request may cost. Zero values take the defaults.
type Limits struct {
	// MaxBodyBytes caps a POST body (http.MaxBytesHandler).
	MaxBodyBytes int64
	// MaxTokens caps the lexer's token count before parsing.
	MaxTokens int
	// MaxComplexity is gqlgen's fixed complexity limit (1 per field).
	MaxComplexity int
	// MaxDepth caps field nesting; MaxIntrospectionDepth that of __schema
	// and __type.
	MaxDepth              int
	MaxIntrospectionDepth int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = 64 << 10
	}
	if l.MaxTokens <= 0 {
		l.MaxTokens = 2000
	}
	if l.MaxComplexity <= 0 {
		l.MaxComplexity = 500
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = 10
	}
	if l.MaxIntrospectionDepth <= 0 {
		l.MaxIntrospectionDepth = 20
	}
	return l
}

// HandlerOptions configures the /query handler.
type HandlerOptions struct {
	Tokens        *auth.Tokens
	Log           *slog.Logger
	Limits        Limits
	Introspection bool
	// PingInterval is how often a websocket client is pinged; a client that
	// misses two pongs is disconnected.
	PingInterval time.Duration
}

// NewHandler returns the /query handler: websocket first (so an upgrade is
// never mistaken for a GET query), then POST and GET, with every request
// authenticated, bounded and its errors presented by presentErrors.
func NewHandler(r *Resolver, opts HandlerOptions) http.Handler {
	lim := opts.Limits.withDefaults()
	if opts.PingInterval <= 0 {
		opts.PingInterval = 10 * time.Second
	}
	srv := handler.New(NewExecutableSchema(Config{Resolvers: r}))
	srv.AddTransport(transport.Websocket{
		PingPongInterval: opts.PingInterval,
		InitTimeout:      10 * time.Second,
		InitFunc:         wsAuthenticate(opts.Tokens),
	})
	srv.AddTransport(transport.Options{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	srv.SetParserTokenLimit(lim.MaxTokens)
	srv.SetErrorPresenter(presentErrors(opts.Log))
	srv.SetRecoverFunc(recoverPanic(opts.Log))
	if opts.Introspection {
		srv.Use(extension.Introspection{})
	}
	srv.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](256)})
	srv.Use(extension.FixedComplexityLimit(lim.MaxComplexity))
	srv.Use(depthLimit{max: lim.MaxDepth, introspectionMax: lim.MaxIntrospectionDepth})
	srv.AroundRootFields(authorize)
	return http.MaxBytesHandler(withClientIP(opts.Tokens.Middleware(srv)), lim.MaxBodyBytes)
}

// closeUnauthorized is the websocket close code for a bad token: 4401 tells
// graphql-ws clients not to reconnect in a loop.
const closeUnauthorized = 4401

// wsAuthenticate checks the connection_init payload's Authorization (the
// same "Bearer <JWT>" as the HTTP header) and closes with 4401 if it is
// missing or invalid.
func wsAuthenticate(tokens *auth.Tokens) transport.WebsocketInitFunc {
	return func(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		h := p.Authorization()
		if h == "" {
			if v, ok := p["authorization"].(string); ok {
				h = v
			}
		}
		id, err := tokens.VerifyHeader(h)
		if err != nil {
			return transport.WithWebsocketCloseCode(ctx, closeUnauthorized), nil, err
		}
		return auth.WithIdentity(ctx, id, nil), nil, nil
	}
}
