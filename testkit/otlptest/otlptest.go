// Package otlptest is an OTLP traces receiver of the tests' own: it
// decodes what an exporter posts to /v1/traces (protobuf, gzipped or
// not), or sends over gRPC, into the OTLP types and keeps the spans, or
// only counts them.
package otlptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Receiver takes OTLP/HTTP trace exports. Its zero value keeps every
// span; Discard makes it count them only.
type Receiver struct {
	// Discard counts the spans and drops them (a sink for load runs).
	Discard bool

	mu       sync.Mutex
	spans    []*tracepb.Span
	count    int64
	requests int64
}

// Start serves a Receiver on a loopback port until the test ends; its
// URL is the base an exporter's OTEL_EXPORTER_OTLP_ENDPOINT names.
func Start(tb testing.TB) (*Receiver, string) {
	tb.Helper()
	r := &Receiver{}
	srv := httptest.NewServer(r)
	tb.Cleanup(srv.Close)
	return r, srv.URL
}

// ServeHTTP takes one export: POST /v1/traces, an ExportTraceServiceRequest
// in protobuf, answered with an empty ExportTraceServiceResponse.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.take(&export)
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// take keeps (or counts) one export's spans.
func (r *Receiver) take(export *coltrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	for _, rs := range export.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.count += int64(len(ss.Spans))
			if !r.Discard {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
	}
}

// StartGRPC serves a Receiver over OTLP/gRPC on a loopback port until the
// test ends; its URL is what OTEL_EXPORTER_OTLP_ENDPOINT names with
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc.
func StartGRPC(tb testing.TB) (*Receiver, string) {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &Receiver{}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, traceService{r: r})
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	return r, "http://" + lis.Addr().String()
}

// traceService is the Receiver as OTLP's gRPC trace service.
type traceService struct {
	coltrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	s.r.take(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// Count is how many spans were received, and in how many exports.
func (r *Receiver) Count() (spans, exports int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count, r.requests
}

// ID is a trace or span id as hex, for messages and maps.
func ID(b []byte) string { return hex.EncodeToString(b) }
