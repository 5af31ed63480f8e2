package persistence

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A consumer's name is its node's identity in every log's consumer group
// (NODE_ID): stable across restarts, so that a restarted node re-reads its
// own pending entries at once instead of waiting ClaimIdle for another
// node to take them over. Two running processes must
// not share it. Sharing loses nothing (both would read the same pending
// list and insert the same orders, which the database's conflict clause
// makes no-ops), but it doubles their work and hides which node holds
// what. So a writer holds a lease on its name while it runs, and a second
// process with the same name refuses to start.

// ErrConsumerInUse says another running process holds this writer's
// consumer name: two nodes were given the same NODE_ID.
var ErrConsumerInUse = errors.New("in use by another running process")

// leaseKey is the key of the lease on this consumer's name.
func (c *LogConsumer) leaseKey() string { return consumerLeaseKey(c.fam.LeasePrefix, c.opts.Consumer) }

// heldConsumers are the lease keys of the consumer names this process
// holds: a lease left by an earlier process with this process's id (a
// restarted container is pid 1 again) is told apart from one of our own
// consumers.
var heldConsumers sync.Map

// leaseValue names the holder: its host, its process id and a random
// token, so that a restarted node can tell a lease left by its own dead
// predecessor from one held by a live process.
func leaseValue() string {
	host, _ := os.Hostname()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return strings.Join([]string{host, strconv.Itoa(os.Getpid()), hex.EncodeToString(b)}, " ")
}

// takeLeaseScript takes a consumer name's lease: scripts/take_lease.lua.
var takeLeaseScript = newScript("take_lease")

// refreshLeaseScript extends our lease, or takes it again: scripts/refresh_lease.lua.
var refreshLeaseScript = newScript("refresh_lease")

// releaseLeaseScript drops our lease: scripts/release_lease.lua.
var releaseLeaseScript = newScript("release_lease")

// Acquire takes the lease on the consumer's name, so that no other
// running process reads the family's logs under the same name; Run keeps it
// and releases it when it returns. A lease left by a process that died
// (killed without releasing it) is taken at once when that process ran on
// this host and is gone, and otherwise once it expires (ConsumerLease);
// a lease that stays held that long belongs to a live process, and
// Acquire returns an error wrapping ErrConsumerInUse.
func (c *LogConsumer) Acquire(ctx context.Context) error {
	name := c.opts.Consumer
	value := leaseValue()
	ttl := strconv.FormatInt(c.opts.ConsumerLease.Milliseconds(), 10)
	key := c.leaseKey()
	deadline := time.Now().Add(c.opts.ConsumerLease + time.Second)
	for {
		seen, err := c.rdb.Get(ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("read lease of consumer %q: %w", name, err)
		}
		expect := seen
		if seen != "" && !deadHolder(seen, key) {
			expect = "\x00" // never the value: a live holder's lease is free only once it expires
		}
		took, err := takeLeaseScript.Run(ctx, c.rdb, []string{key}, value, ttl, expect).Int()
		if err != nil {
			return fmt.Errorf("take lease of consumer %q: %w", name, err)
		}
		if took == 1 {
			c.lease = value
			heldConsumers.Store(key, value)
			return nil
		}
		if time.Now().After(deadline) {
			host, pid := "?", "?"
			if parts := strings.Fields(seen); len(parts) == 3 {
				host, pid = parts[0], parts[1]
			}
			return fmt.Errorf("consumer name %q %w (host %s, pid %s)", name, ErrConsumerInUse, host, pid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("take lease of consumer %q: %w", name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// deadHolder tells whether a lease value names a process of this host that
// is gone: no such process, or our own process id while this process holds
// no lease on the name (a restarted container has the same pid as the one
// that died). key is the lease's key.
func deadHolder(value, key string) bool {
	parts := strings.Fields(value)
	if len(parts) != 3 {
		return false
	}
	host, _ := os.Hostname()
	pid, err := strconv.Atoi(parts[1])
	if parts[0] != host || err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		_, ours := heldConsumers.Load(key)
		return !ours
	}
	if zombie(pid) {
		return true
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	err = p.Signal(syscall.Signal(0))
	return err != nil && !errors.Is(err, syscall.EPERM)
}

// zombie tells whether a process has exited and only waits for its parent
// to reap it (a node killed by a supervisor that has not waited for it
// yet), which signal 0 still reaches. Linux's /proc says so; elsewhere it
// reports false and the lease is waited out.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (command) state ...": the command may hold spaces and brackets.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// keepLease refreshes the lease taken by Acquire (if any) until the
// returned stop is called, which then releases it. A refresh that finds
// the name held by another process is logged as an error: two nodes share
// a NODE_ID. The writer goes on (nothing is lost, see above).
func (c *LogConsumer) keepLease(ctx context.Context) (stop func()) {
	if c.lease == "" {
		return func() {}
	}
	key := c.leaseKey()
	ttl := strconv.FormatInt(c.opts.ConsumerLease.Milliseconds(), 10)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(c.opts.ConsumerLease / 5)
		defer t.Stop()
		clash := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ok, err := refreshLeaseScript.Run(ctx, c.rdb, []string{key}, c.lease, ttl).Int()
			if err != nil {
				continue // Redis unavailable: the next tick tries again
			}
			if ok == 0 && !clash {
				holder, _ := c.rdb.Get(ctx, key).Result()
				c.log.ErrorContext(ctx, "another running process uses this node's consumer name; give each node its own NODE_ID",
					"consumer", c.opts.Consumer, "holder", holder)
			}
			clash = ok == 0
		}
	}()
	return func() {
		cancel()
		<-done
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer rcancel()
		_ = releaseLeaseScript.Run(rctx, c.rdb, []string{key}, c.lease).Err()
		heldConsumers.Delete(key)
		c.lease = ""
	}
}

// removeDeadConsumerScript deletes a log's idle consumers that hold nothing: scripts/remove_dead_consumer.lua.
var removeDeadConsumerScript = newScript("remove_dead_consumer")

// removeDeadConsumers deletes, from every log's group, consumers that
// hold nothing and have not read for DeadConsumerIdle: names of nodes that
// are gone (or were renamed), which would otherwise pile up in the groups
// forever. Deleting a live consumer by mistake costs nothing: it holds no
// entry, and its next read creates it again. Errors only postpone it.
func (c *LogConsumer) removeDeadConsumers(ctx context.Context, logs []string) int {
	bound := strconv.FormatInt(c.opts.DeadConsumerIdle.Milliseconds(), 10)
	n := 0
	for _, s := range logs {
		removed, err := removeDeadConsumerScript.Run(ctx, c.rdb, []string{s}, c.opts.Consumer, bound, c.fam.Group).Int()
		if err != nil {
			continue
		}
		n += removed
	}
	if n > 0 {
		c.log.InfoContext(ctx, c.fam.Name+" removed idle consumers holding no entries from its logs", "consumers", n)
	}
	return n
}
