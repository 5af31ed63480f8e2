package persistence

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// RedisDurability is how a Redis server keeps its data across a crash, as
// its CONFIG says. Stock, buyers' marks, request ids and the order log live
// in Redis, the order log until its orders are in the database, so what a
// crash does to them decides whether the service keeps its promises.
type RedisDurability struct {
	AppendOnly  bool   // appendonly yes
	AppendFsync string // always, everysec or no (meaningful with AppendOnly)
	Save        string // RDB snapshot rules ("" = none)
}

// ReadRedisDurability asks the server with CONFIG GET. Managed services
// often disable or rename CONFIG, or an ACL refuses it; the error says so,
// and the caller then cannot tell what a crash does (DurabilityUnknown).
func ReadRedisDurability(ctx context.Context, rdb redis.UniversalClient) (RedisDurability, error) {
	var d RedisDurability
	got := map[string]string{}
	for _, name := range []string{"appendonly", "appendfsync", "save"} {
		m, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			return d, fmt.Errorf("redis CONFIG GET %s: %w", name, err)
		}
		v, ok := m[name]
		if !ok && name != "save" { // a server without RDB support may not list save
			return d, fmt.Errorf("redis CONFIG GET %s: no such setting", name)
		}
		got[name] = strings.TrimSpace(v)
	}
	d.AppendOnly = strings.EqualFold(got["appendonly"], "yes")
	d.AppendFsync = strings.ToLower(got["appendfsync"])
	d.Save = got["save"]
	return d, nil
}

// DurabilityRisk is one row of the table of what a crash of the stock
// Redis can do to the service's promises, by its persistence setting. The
// start-up warning (Warning) and the operators' documentation (docs/OPERATIONS.md,
// docs/RELIABILITY.md, checked against DurabilityTable by a test) say the
// same words.
type DurabilityRisk struct {
	// Setting names the persistence setting, as an operator writes it.
	Setting string
	// Crash says what a crash can do, in the words of the promises:
	// oversell, two orders for one request id, orders answered OK lost.
	Crash string
	// Safe is true for the one setting under which a crash breaks no
	// promise.
	Safe bool
	// Remedy is what keeps every promise, when it is more than running
	// the server with SafeDurability.
	Remedy string
}

// SafeDurability is the setting under which a crash of the stock Redis
// breaks no promise. It covers a crash of that server; a failover to a
// replica (Sentinel, Redis Cluster) keeps the orders answered OK only with
// replica acknowledgements (REDIS_ACK_REPLICAS).
const SafeDurability = "appendonly yes + appendfsync always"

// failoverNote is said with every setting: what a failover keeps.
const failoverNote = "a failover to a replica (Sentinel, Redis Cluster) keeps the orders answered OK only with REDIS_ACK_REPLICAS=1 or more"

// backInTime is what the service does when Redis comes back older with
// its keys present, in one phrase, so that every such row says it alike.
const backInTime = "the service sees that Redis restarted and rebuilds each voucher and red packet from the database " +
	"and the order logs before it sells again, so it neither oversells nor answers a stored order's request id with another order, " +
	"but an order answered OK in that lost window that no order writer had read yet survives only in the node that sold it, which appends it to the order log again: " +
	"it is lost, and a retry of its request id can get a new order, if that node dies too (one machine for both) or it is a red-packet grab"

// The rows of DurabilityTable, by setting.
var (
	DurabilityAlways = DurabilityRisk{
		Setting: "appendonly yes, appendfsync always",
		Crash:   "a crash of this server loses nothing: every write is on disk before the grab is answered",
		Safe:    true,
	}
	DurabilityEverysec = DurabilityRisk{
		Setting: "appendonly yes, appendfsync everysec",
		Crash: "a crash of the machine (or of Redis while its disk is slow) brings Redis back up to two seconds " +
			"in the past with the voucher's keys present: " + backInTime,
	}
	DurabilityNoFsync = DurabilityRisk{
		Setting: "appendonly yes, appendfsync no",
		Crash: "a crash of the machine brings Redis back as far in the past as the operating system had not yet " +
			"written (about 30 seconds on Linux), keys present: " + backInTime,
	}
	DurabilitySnapshots = DurabilityRisk{
		Setting: "appendonly no, save rules (snapshots only)",
		Crash:   "a crash brings Redis back at its last snapshot, minutes in the past, keys present: " + backInTime,
	}
	DurabilityNone = DurabilityRisk{
		Setting: "appendonly no, no save rules",
		Crash: "a crash brings Redis back empty and it is reloaded from the database: an order answered OK and still on its way " +
			"to the database survives only in the node that sold it, which appends it to the order log again: it is lost, and a retry " +
			"of its request id can get a second order, if that node dies too (one machine for both) or it is a red-packet grab",
	}
	DurabilityEmbedded = DurabilityRisk{
		Setting: "in-process Redis (DATABASE_URL without REDIS_URL, ALLOW_EMBEDDED_REDIS=true)",
		Crash: "Redis dies with the process: a crash loses the orders answered OK that were still on their way " +
			"to the database, and a retry of their request ids can get a second order; every node has a Redis of its own, " +
			"so two nodes on one database each sell the whole stock: they oversell",
		Remedy: "set REDIS_URL to a Redis run with " + SafeDurability,
	}
	DurabilityUnknown = DurabilityRisk{
		Setting: "settings unreadable (CONFIG disabled, renamed or refused)",
		Crash: "what a crash does cannot be told: unless the server runs " + SafeDurability +
			", a crash can lose orders answered OK that no order writer had read yet",
		Remedy: "make sure the server runs " + SafeDurability + " (ask the provider)",
	}
)

// DurabilityTable is every row, in the order the documentation shows them.
var DurabilityTable = []DurabilityRisk{
	DurabilityAlways, DurabilityEverysec, DurabilityNoFsync, DurabilitySnapshots, DurabilityNone,
	DurabilityEmbedded, DurabilityUnknown,
}

// Risk is the row of DurabilityTable that the server's settings fall in.
// With appendonly yes the snapshots do not matter: Redis loads the
// append-only file.
func (d RedisDurability) Risk() DurabilityRisk {
	switch {
	case d.AppendOnly && d.AppendFsync == "always":
		return DurabilityAlways
	case d.AppendOnly && d.AppendFsync == "no":
		return DurabilityNoFsync
	case d.AppendOnly:
		return DurabilityEverysec
	case d.Save != "":
		return DurabilitySnapshots
	default:
		return DurabilityNone
	}
}

// serverRunScript reads the server's run id as the selling scripts do: scripts/server_run.lua.
var serverRunScript = newScript("server_run")

// NoRunID is the run id of a server that does not tell it.
const NoRunID = "-"

// ReadRunID reads the run id of the server as the scripts that sell read
// it; NoRunID for a server that does not tell it (INFO refused or renamed,
// as some managed services do, or an in-process Redis): there, Redis
// going back in time across a restart or a failover cannot be noticed.
func ReadRunID(ctx context.Context, rdb redis.Scripter) (string, error) {
	id, err := serverRunScript.Run(ctx, rdb, nil).Text()
	if err != nil {
		return "", fmt.Errorf("read the redis run id: %w", err)
	}
	return id, nil
}

// NoRunIDWarning is the start-up line for a server that does not tell its
// run id.
const NoRunIDWarning = "redis does not tell its run id (INFO server refused from scripts): a restart or failover that brings " +
	"Redis back older with its keys present cannot be noticed, and can oversell, answer one request id with two orders, " +
	"and lose orders answered OK; to keep every promise: allow INFO (the @dangerous category holds it) for the service's Redis user"

// FailoverWithoutAcks is the start-up line for a Redis reached in mode
// (sentinel or cluster) whose replicas can be promoted, without replica
// acknowledgements.
func FailoverWithoutAcks(mode string) string {
	return "redis replicas can be promoted (REDIS_MODE=" + mode + ") and grabs do not wait for them: " +
		"a failover loses the orders answered OK that the promoted replica had not received " +
		"(the service rebuilds every voucher from the database and the order logs, so it does not oversell); " +
		"to keep them: REDIS_ACK_REPLICAS=1"
}

// Warning is the start-up line for a setting: what a crash can do, and
// what would keep every promise.
func (r DurabilityRisk) Warning() string {
	if r.Safe {
		return "redis persistence keeps the promises across a crash; setting: " + r.Setting + "; risk: " + r.Crash + "; " + failoverNote
	}
	remedy := r.Remedy
	if remedy == "" {
		remedy = "run the server with " + SafeDurability
	}
	return "redis persistence puts the promises at risk; setting: " + r.Setting + "; risk: " + r.Crash +
		"; to keep every promise: " + remedy + "; " + failoverNote
}

// EvictingPolicy reads the maxmemory-policy of the server (of every
// primary of a Redis Cluster) as the selling scripts read it, from the
// token they verify a load under (ReadRunID: "!<policy>" while it evicts),
// and returns the first that evicts keys; "" when none does, or none
// tells. Under an evicting policy Redis may drop a request id or an order
// log when memory runs short, which breaks the promises without a trace;
// the scripts refuse to sell under it, and a node refuses to start.
func EvictingPolicy(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	read := func(ctx context.Context, c redis.Scripter) (string, error) {
		token, err := ReadRunID(ctx, c)
		if err != nil {
			return "", err
		}
		return ParseRunToken(token).Evicting, nil
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return read(ctx, rdb)
	}
	var mu sync.Mutex
	found := ""
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		p, err := read(ctx, c)
		mu.Lock()
		if found == "" {
			found = p
		}
		mu.Unlock()
		return err
	})
	return found, err
}

// EvictingPolicyError is why a node refuses a Redis whose maxmemory-policy
// evicts keys.
func EvictingPolicyError(policy string) string {
	return "redis maxmemory-policy is " + policy + ": when memory runs short Redis drops keys, and a dropped request id " +
		"or order log gives one request two orders or loses orders answered OK, without a trace; set maxmemory-policy noeviction " +
		"(redis.conf, or CONFIG SET maxmemory-policy noeviction): a full Redis then refuses new sales (UNAVAILABLE) and keeps every promise"
}

// RunToken is a token of ReadRunID taken apart.
type RunToken struct {
	Run      string // the server's run id; NoRunID when it does not tell
	Evicted  string // the keys it evicted since it started; "0" for none
	Evicting string // its maxmemory-policy while that evicts keys; "" otherwise
}

// ParseRunToken takes a token of ReadRunID apart: "<run id>[/<evicted>]",
// or "!<policy>" while the policy evicts keys (the run id is then not
// told).
func ParseRunToken(token string) RunToken {
	if policy, ok := strings.CutPrefix(token, evictingMark); ok {
		return RunToken{Evicting: policy}
	}
	run, evicted, _ := strings.Cut(token, "/")
	if evicted == "" {
		evicted = "0"
	}
	return RunToken{Run: run, Evicted: evicted}
}
