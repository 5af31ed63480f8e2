// Command otlpsink is an OTLP/HTTP traces endpoint that accepts every
// export and drops it, counting the spans: what a node exports to when
// the cost of tracing is measured under load (docs/OPERATIONS.md,
// "Tracing"), without a collector.
//
//	go run ./cmd/otlpsink --addr 127.0.0.1:4318
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 flashsale
//
// Every --every it prints the spans and exports received so far.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"flashsale/testkit/otlptest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "otlpsink:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:4318", "listen address (OTLP/HTTP's port is 4318)")
	every := flag.Duration("every", 10*time.Second, "how often to print the counts (0: only at the end)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rcv := &otlptest.Receiver{Discard: true}
	srv := &http.Server{Addr: *addr, Handler: rcv, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("listening", "addr", *addr)
	var tick <-chan time.Time
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
			spans, exports := rcv.Count()
			log.Info("received", "spans", spans, "exports", exports)
		case err := <-errc:
			return fmt.Errorf("serve: %w", err)
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("shut down: %w", err)
			}
			spans, exports := rcv.Count()
			log.Info("received", "spans", spans, "exports", exports)
			return nil
		}
	}
}
