package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// cpuProfile takes one CPU profile of the service (its PPROF_ADDR) while
// an attack runs: it asks from the attack's start for seconds, and writes
// what it got to out.
type cpuProfile struct {
	url     string
	seconds time.Duration
	out     string
	done    chan error
}

func (p *cpuProfile) start(ctx context.Context) {
	p.done = make(chan error, 1)
	go func() { p.done <- p.fetch(ctx) }()
}

func (p *cpuProfile) fetch(ctx context.Context) error {
	secs := max(int(p.seconds/time.Second), 1)
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(p.url, "/"), secs)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(p.out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// wait returns when the profile is written (nil p: none was asked for).
func (p *cpuProfile) wait() error {
	if p == nil || p.done == nil {
		return nil
	}
	return <-p.done
}
