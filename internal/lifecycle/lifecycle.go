// Package lifecycle is the one contract of everything that runs in the
// background of a node (the sequencers, the persistence actors, the
// maintenance jobs, the subscriptions' loops, the profiler, a kept
// lease), and the runner that starts such services in order and stops
// them in reverse.
//
// A Service's Start starts it and returns: ctx bounds the start itself
// (what Start waits for: a lease, a first load), and what Start leaves
// running lasts until Stop, not until ctx ends, so that a node told to
// stop can still drain. Stop ends it and returns once its goroutines are
// gone. No constructor starts a goroutine: Start does.
package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// Service is anything that runs in the background. Stop must be safe
// before Start, after a Start that failed (it releases what that Start
// took before failing), and repeated.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// Loop is a blocking function run as a Service: Start runs it in a
// goroutine of its own on a context that Stop cancels; Stop waits for it
// to return. A loop that returns early by itself is simply over.
type Loop struct {
	run func(ctx context.Context)

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewLoop returns run as a Service; nothing runs before Start.
func NewLoop(run func(ctx context.Context)) *Loop {
	return &Loop{run: run, done: make(chan struct{})}
}

// Start runs the loop until Stop; ctx's values reach it, its cancellation
// does not. A second Start does nothing.
func (l *Loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return nil
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(l.done)
		l.run(ctx)
	}()
	return nil
}

// Stop cancels the loop's context and waits for it to return.
func (l *Loop) Stop() {
	l.mu.Lock()
	started, cancel := l.started, l.cancel
	l.mu.Unlock()
	if !started {
		return
	}
	cancel()
	<-l.done
}

// funcs is a Service made of two functions.
type funcs struct {
	start func(ctx context.Context) error
	stop  func()
}

func (f funcs) Start(ctx context.Context) error {
	if f.start == nil {
		return nil
	}
	return f.start(ctx)
}

func (f funcs) Stop() {
	if f.stop != nil {
		f.stop()
	}
}

// Func is a Service of a step that opens something and closes it (a
// database, a client, a listener) and runs no goroutine of its own; either
// function may be nil. stop runs also after a failed start, so it must be
// safe on what start left unset.
func Func(start func(ctx context.Context) error, stop func()) Service {
	return funcs{start: start, stop: stop}
}

// built is a Service that Start builds first.
type built struct {
	build func(ctx context.Context) (Service, error)

	mu  sync.Mutex
	svc Service
}

// Build is the Service that build returns, built at Start: for a part
// that can only be built once the services before it in a Group have
// started. A build that fails may still return a Service holding what it
// took; Stop stops it.
func Build(build func(ctx context.Context) (Service, error)) Service {
	return &built{build: build}
}

func (b *built) Start(ctx context.Context) error {
	svc, err := b.build(ctx)
	b.mu.Lock()
	b.svc = svc
	b.mu.Unlock()
	if err != nil || svc == nil {
		return err
	}
	return svc.Start(ctx)
}

func (b *built) Stop() {
	b.mu.Lock()
	svc := b.svc
	b.mu.Unlock()
	if svc != nil {
		svc.Stop()
	}
}

// Named is a Service with the name a Group reports it by.
type Named struct {
	Name    string
	Service Service
}

// StartError is a Group's failed start: the name of the service whose
// Start failed, and its error.
type StartError struct {
	Name string
	Err  error
}

func (e *StartError) Error() string { return fmt.Sprintf("start %s: %v", e.Name, e.Err) }

func (e *StartError) Unwrap() error { return e.Err }

// Group starts its services in their order and stops them in the
// reverse: what a service uses starts before it and stops after it. A
// Group is a Service itself.
type Group struct {
	services []Named
	// BeforeStop, if set, runs before the services stop, while all that
	// started still runs, whether Stop was called or a Start failed: the
	// place for a drain.
	BeforeStop func()
	// Log, if set, hears at debug level which service failed to start.
	Log *slog.Logger

	mu      sync.Mutex
	started []Named
}

// NewGroup returns the group of services, in start order.
func NewGroup(services ...Named) *Group {
	return &Group{services: services}
}

// Start starts the services in order. At the first that fails it stops
// what started, that one included (it may hold what it took before
// failing), in the reverse order, and returns a *StartError naming it; a
// later service never starts.
func (g *Group) Start(ctx context.Context) error {
	for _, s := range g.services {
		g.mu.Lock()
		g.started = append(g.started, s)
		g.mu.Unlock()
		if err := s.Service.Start(ctx); err != nil {
			if g.Log != nil {
				g.Log.Debug("start step failed", "step", s.Name, "err", err)
			}
			g.Stop()
			return &StartError{Name: s.Name, Err: err}
		}
	}
	return nil
}

// Stop runs BeforeStop, then stops the started services from the last.
// Safe to repeat: a second Stop does nothing.
func (g *Group) Stop() {
	g.mu.Lock()
	started := g.started
	g.started = nil
	g.mu.Unlock()
	if len(started) == 0 {
		return
	}
	if g.BeforeStop != nil {
		g.BeforeStop()
	}
	for i := len(started) - 1; i >= 0; i-- {
		started[i].Service.Stop()
	}
}
